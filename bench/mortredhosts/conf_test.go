package mortredhosts

import (
	"path/filepath"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

// The planes the benchmark writes load with mortred's own loaders
// (unknown keys are errors there), in the shapes of parts 1 and 3.
func TestWritePlaneLoads(t *testing.T) {
	root := orttest.RepoRoot()
	if root == "" {
		t.Fatal("no repository root above the test's directory")
	}
	for _, c := range []struct {
		name    string
		host    string
		gateway map[string]any
		models  []model
	}{
		{"edge", "127.0.0.1", nil, []model{{id: "TESTMODEL", port: 9301}}},
		{"host", "10.231.250.2", map[string]any{"host_id": "h1", "peers": map[string]string{"h1": "10.231.250.2:8080", "h2": "10.231.250.3:8080"}},
			[]model{clsModel(root, 9002, map[string]any{"async_job_ttl": 3000})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := writePlane(filepath.Join(t.TempDir(), "conf"), c.host, 8787, 8080, c.gateway, c.models)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := config.LoadControlPlane(p.file)
			if err != nil {
				t.Fatal(err)
			}
			if cp.Gateway.Host != c.host || cp.Gateway.Port != 8080 || cp.Supervisor.APIPort != 8787 {
				t.Errorf("gateway %s:%d, API port %d", cp.Gateway.Host, cp.Gateway.Port, cp.Supervisor.APIPort)
			}
			if c.gateway != nil && (cp.Gateway.HostID != "h1" || cp.Gateway.Peers["h2"] != "10.231.250.3:8080") {
				t.Errorf("host_id %q peers %v", cp.Gateway.HostID, cp.Gateway.Peers)
			}
			cat, err := config.LoadCatalog(filepath.Join(p.dir, "server"))
			if err != nil {
				t.Fatal(err)
			}
			if len(cat.Entries) != 1 || cat.Entries[0].ID != c.models[0].id || cat.Entries[0].Port != c.models[0].port {
				t.Errorf("catalog %+v", cat.Entries)
			}
		})
	}
}
