package doccmd

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

const doc = "# Title\n" +
	"\n" +
	"## A short tour\n" +
	"\n" +
	"```sh\n" +
	"export A=1 B=2\n" +
	"bin/daemon &                 # node daemon on :6380\n" +
	"X=1 Y=2 \\\n" +
	"  bin/agent -- bin/sim --port 8001 &\n" +
	"\n" +
	"# a comment line\n" +
	"curl -s 'localhost:1/#frag' -d \"a # b\" # says hi\n" +
	"make a && echo b\n" +
	"echo a\\#b\n" +
	"```\n" +
	"\n" +
	"```json\n" +
	"{\"a\": 1}\n" +
	"```\n" +
	"\n" +
	"### Console\n" +
	"~~~~console\n" +
	"$ echo one\n" +
	"one\n" +
	"```\n" +
	"$ echo two \\\n" +
	"  three\n" +
	"two three\n" +
	"~~~~\n" +
	"    ```sh\n" +
	"    indented code, not a fence\n" +
	"    ```\n"

func TestBlocks(t *testing.T) {
	all := Blocks([]byte(doc))
	if len(all) != 3 {
		t.Fatalf("blocks = %d, want 3: %+v", len(all), all)
	}
	if all[0].Lang != "sh" || all[0].Line != 6 || all[0].Heading != "A short tour" {
		t.Errorf("first block = %+v", all[0])
	}
	if all[1].Lang != "json" || all[1].Text != "{\"a\": 1}\n" {
		t.Errorf("second block = %+v", all[1])
	}
	// A ``` line inside a ~~~~ fence is content, not a close.
	if all[2].Lang != "console" || all[2].Heading != "Console" || !strings.Contains(all[2].Text, "```\n") {
		t.Errorf("third block = %+v", all[2])
	}
	if got := Blocks([]byte(doc), "SH", "bash"); len(got) != 1 || got[0].Lang != "sh" {
		t.Errorf("Blocks(sh, bash) = %+v", got)
	}
}

func TestCommands(t *testing.T) {
	got := Commands([]byte(doc), "sh")
	want := []Command{
		{Line: 6, Text: "export A=1 B=2"},
		{Line: 7, Text: "bin/daemon &", Comment: "node daemon on :6380", Background: true},
		{Line: 8, Text: "X=1 Y=2 bin/agent -- bin/sim --port 8001 &", Background: true},
		{Line: 12, Text: `curl -s 'localhost:1/#frag' -d "a # b"`, Comment: "says hi"},
		{Line: 13, Text: "make a && echo b"},
		{Line: 14, Text: `echo a\#b`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Commands(sh) =\n%+v\nwant\n%+v", got, want)
	}
	got = Commands([]byte(doc), "console")
	want = []Command{{Line: 23, Text: "echo one"}, {Line: 26, Text: "echo two three"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Commands(console) =\n%+v\nwant\n%+v", got, want)
	}
}

func TestUnclosedFenceAndTrailingContinuation(t *testing.T) {
	got := Commands([]byte("```sh\necho a \\\n"), "sh")
	want := []Command{{Line: 2, Text: "echo a"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func FuzzCommands(f *testing.F) {
	f.Add(doc)
	f.Add("```sh\n'unterminated # quote\n")
	f.Add("~~~\n\\")
	f.Fuzz(func(t *testing.T, s string) {
		for _, b := range Blocks([]byte(s)) {
			// The scanner drops a final line's missing newline and a line's "\r".
			if !strings.Contains(s, strings.TrimSuffix(b.Text, "\n")) && utf8.ValidString(s) && !strings.Contains(s, "\r") {
				t.Fatalf("block text %q not in the document", b.Text)
			}
			for _, c := range b.Commands() {
				if c.Text == "" || c.Text != strings.TrimSpace(c.Text) {
					t.Fatalf("command %q is empty or untrimmed", c.Text)
				}
				if c.Line < b.Line {
					t.Fatalf("command line %d before its block's %d", c.Line, b.Line)
				}
			}
		}
	})
}
