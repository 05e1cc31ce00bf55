package balance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fe64bb06/frontdoor/internal/atomicfile"
)

// A router's prefix index is what it learned from the prompts it sent:
// which replica holds which prefix. A restarted router that starts with an
// empty index sends a known tenant's first requests to the prompt's home
// replica only while the home is nearly as idle as the least loaded one
// (HomeSlack), and by load otherwise, where the engine has to prefill the
// whole prompt again; the other routers, who remember, keep sending the
// tenant to its warm replica. With ROUTING_INDEX_FILE the index outlives
// the process: the router saves it when it stops and reads it when it
// starts, so the router that replaces it in a rolling restart routes like
// the one it replaces from its first request.
//
// The file is JSON (IndexFileVersion), written whole to a temporary file
// and renamed over the old one, mode 0600. It holds 64-bit hashes of the
// prompts' leading blocks and group names, no text. A file older than
// IndexFileMaxAge is not read: the engines' caches have turned over since,
// and an index that old would send prompts to replicas that dropped them
// (load would still bound it, as for any stale entry).

// IndexFileVersion is the format of the saved index.
const IndexFileVersion = 1

// IndexFileMaxAge is the age past which a saved index is not read.
const IndexFileMaxAge = 10 * time.Minute

// maxIndexFile bounds the saved index read at start: a full index of
// DefaultIndexBlocks blocks takes about 1 MiB per model.
const maxIndexFile = 256 << 20

// ErrIndexStale is LoadIndex's error for an index saved more than
// IndexFileMaxAge ago.
var ErrIndexStale = errors.New("saved index is too old")

type savedIndex struct {
	Version int                   `json:"version"`
	Saved   time.Time             `json:"saved"`
	Models  map[string]savedModel `json:"models"`
}

// savedModel is one model's index, least recently used block first;
// Holders[i] are the groups holding Blocks[i], most recent first.
type savedModel struct {
	Blocks  []uint64   `json:"blocks"`
	Holders [][]string `json:"holders"`
}

// IndexInfo describes a saved or loaded index.
type IndexInfo struct {
	Models, Blocks int
	// Saved is when the index was written.
	Saved time.Time
}

// SaveIndex writes every model's prefix index to w.
func (b *Balancer) SaveIndex(w io.Writer) (IndexInfo, error) {
	doc := savedIndex{Version: IndexFileVersion, Saved: b.now().UTC(), Models: map[string]savedModel{}}
	info := IndexInfo{Saved: doc.Saved}
	b.models.Range(func(k, v any) bool {
		keys, holders := v.(*modelState).ix.entries()
		if len(keys) > 0 {
			doc.Models[k.(string)] = savedModel{Blocks: keys, Holders: holders}
			info.Models++
			info.Blocks += len(keys)
		}
		return true
	})
	return info, json.NewEncoder(w).Encode(&doc)
}

// LoadIndex reads an index SaveIndex wrote and adds its blocks to the
// balancer's index as the most recently used, keeping each model's most
// recent IndexBlocks. A malformed index changes nothing, nor does one
// saved more than IndexFileMaxAge ago, or in the future (ErrIndexStale).
func (b *Balancer) LoadIndex(r io.Reader) (IndexInfo, error) {
	var doc savedIndex
	dec := json.NewDecoder(io.LimitReader(r, maxIndexFile+1))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return IndexInfo{}, fmt.Errorf("not a saved index: cut short or over %d bytes", maxIndexFile)
		}
		return IndexInfo{}, fmt.Errorf("not a saved index: %w", err)
	}
	if doc.Version != IndexFileVersion {
		return IndexInfo{}, fmt.Errorf("saved index has version %d; this router reads version %d", doc.Version, IndexFileVersion)
	}
	if age := b.now().Sub(doc.Saved); age > IndexFileMaxAge || age < -time.Minute {
		return IndexInfo{Saved: doc.Saved}, fmt.Errorf("%w: saved at %s, %s ago (at most %s)", ErrIndexStale,
			doc.Saved.Format(time.RFC3339), age.Round(time.Second), IndexFileMaxAge)
	}
	for name, m := range doc.Models {
		if name == "" {
			return IndexInfo{}, errors.New("saved index has a model without a name")
		}
		if len(m.Blocks) != len(m.Holders) {
			return IndexInfo{}, fmt.Errorf("saved index of model %q has %d blocks but %d holder lists", name, len(m.Blocks), len(m.Holders))
		}
		for i, hs := range m.Holders {
			if len(hs) == 0 {
				return IndexInfo{}, fmt.Errorf("saved index of model %q: block %d has no holder", name, i)
			}
			for _, h := range hs {
				if h == "" {
					return IndexInfo{}, fmt.Errorf("saved index of model %q: block %d has a holder without a name", name, i)
				}
			}
		}
	}
	info := IndexInfo{Saved: doc.Saved}
	for name, m := range doc.Models {
		ix := b.model(name).ix
		from := max(0, len(m.Blocks)-b.cfg.IndexBlocks)
		for i := from; i < len(m.Blocks); i++ {
			ix.restore(m.Blocks[i], holderList(m.Holders[i]))
		}
		info.Models++
		info.Blocks += len(m.Blocks) - from
	}
	return info, nil
}

// holderList is hs without repeats, at most maxHolders, in a slice of
// its own.
func holderList(hs []string) []string {
	out := make([]string, 0, min(len(hs), maxHolders))
	for _, h := range hs {
		if len(out) == maxHolders {
			break
		}
		dup := false
		for _, o := range out {
			dup = dup || o == h
		}
		if !dup {
			out = append(out, h)
		}
	}
	return out
}

// SaveIndexFile saves the index (SaveIndex) to path, replacing it whole
// (atomicfile), mode 0600.
func (b *Balancer) SaveIndexFile(path string) (IndexInfo, error) {
	var buf bytes.Buffer
	info, err := b.SaveIndex(&buf)
	if err != nil {
		return IndexInfo{}, err
	}
	if err := atomicfile.Write(path, buf.Bytes(), 0o600); err != nil {
		return IndexInfo{}, err
	}
	return info, nil
}

// LoadIndexFile loads the index SaveIndexFile saved at path (LoadIndex).
// It returns an error satisfying errors.Is(err, fs.ErrNotExist) when there
// is none.
func (b *Balancer) LoadIndexFile(path string) (IndexInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return IndexInfo{}, err
	}
	defer f.Close()
	return b.LoadIndex(f)
}
