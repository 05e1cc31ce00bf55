package charts

import (
	"strings"
	"testing"
)

func TestInlinePutsScriptAndStyleInPlace(t *testing.T) {
	page := "<style>body{}" + StyleMarker + "</style><script>" + ScriptMarker + "</script><script>Charts.spark</script>"
	out := string(Inline([]byte(page)))
	if strings.Contains(out, StyleMarker) || strings.Contains(out, ScriptMarker) {
		t.Fatalf("markers left: %s", out)
	}
	if !strings.Contains(out, "<script>"+string(script)+"</script>") || !strings.Contains(out, "body{}"+string(style)+"</style>") {
		t.Error("script or style not where the markers were")
	}
	// The script must not end the inline <script> element early.
	if strings.Contains(strings.ToLower(string(script)), "</script") {
		t.Error("charts.js contains </script")
	}
	for _, bad := range []string{"no markers", StyleMarker + StyleMarker + ScriptMarker} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Inline(%q) did not panic", bad)
				}
			}()
			Inline([]byte(bad))
		}()
	}
}
