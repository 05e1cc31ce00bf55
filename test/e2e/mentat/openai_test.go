package e2e

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/openaijs"
)

// The official OpenAI Node clients (v4 and the current major) call
// embeddings and the Responses API, plain and streamed, through the router
// to an enginesim, and parse every answer.
func TestOpenAINodeClientsThroughTheRouter(t *testing.T) {
	d := startDaemon(t, "daemon")
	e := &engine{group: "emb", model: "emb-1", wrap: func(argv []string) []string {
		return append(argv, "--embedding-dim", "48")
	}}
	startAgent(t, d.addr, e)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr)
	r.waitModels(t, "emb-1")
	for _, client := range openaijs.Clients {
		t.Run(client, func(t *testing.T) {
			res, err := openaijs.Run(client, r.url+"/v1", "emb-1")
			if err != nil {
				t.Fatal(err)
			}
			openaijs.Check(t, client, res, "emb-1", 48)
		})
	}
}
