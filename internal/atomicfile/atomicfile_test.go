package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	st, _ := os.Stat(path)
	if err != nil || string(b) != "new" || st.Mode().Perm() != 0o600 {
		t.Fatalf("after Write: %q %v, mode %v", b, err, st.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".f.json.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("a failed write elsewhere changed the file: %q", b)
	}
}
