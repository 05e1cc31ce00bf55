package enginesim

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/openaijs"
)

// The official OpenAI Node clients, v4 and the current major, parse the
// embeddings and Responses API answers (plain and streamed).
func TestOpenAINodeClients(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.EmbeddingDim = 32 })
	for _, client := range openaijs.Clients {
		t.Run(client, func(t *testing.T) {
			r, err := openaijs.Run(client, te.url+"/v1", "sim")
			if err != nil {
				t.Fatal(err)
			}
			openaijs.Check(t, client, r, "sim", 32)
		})
	}
}
