package envelope

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestManualStatusTable holds docs/mortred.md's status table to Table: the
// same rows, in the same order, with the same text and HTTP code.
func TestManualStatusTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/mortred.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Status table\n")
	if !ok {
		t.Fatal("docs/mortred.md has no \"## Status table\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var got []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 3 || strings.Contains(line, "---") || strings.TrimSpace(cells[0]) == "status" {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		got = append(got, strings.Join(cells, " | "))
	}
	var want []string
	for _, r := range Table {
		want = append(want, fmt.Sprintf("%d | %s | %d", r.Status, r.Text, r.HTTP))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/mortred.md status table:\n%s\nwant (mortred/envelope/status.go):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
