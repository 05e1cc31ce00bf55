package main

import (
	"strings"
	"testing"
)

func TestPPOCRTargetsOnePerModel(t *testing.T) {
	table := strings.Join([]string{
		"| model | batching | path | items/s | p50 ms | p99 ms | errors | server / in-process | per round | CPU ms/item | CPU ratio |",
		"|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
		"| PPOCR_CLS | off | in-process | 800.0 | 1.6 | 11.7 | 0 |  |  | 1.69 |  |",
		"| PPOCR_CLS | off | HTTP (8 clients) | 760.0 | 9.9 | 26.6 | 0 | 95 % | 90–99 % | 1.70 + 0.06 | 96 % |",
		"| PPOCR_CLS | on (8) | HTTP (32 clients) | 720.0 | 9.9 | 26.6 | 0 | 91 % | 90–99 % | 1.70 + 0.06 | 96 % |",
		"| BLAZEFACE | off | HTTP (8 clients) | 150.0 | 44.0 | 171.1 | 0 | 92 % | 71–120 % | 8.98 + 0.34 | 81 % |",
		"| BLAZEFACE | on (8) | HTTP (32 clients) | 120.0 | 44.0 | 171.1 | 0 | 84 % | 71–120 % | 8.98 + 0.34 | 81 % |",
	}, "\n")
	ts := ppocrTargets(table)
	if len(ts) != 2 {
		t.Fatalf("%d targets, want 2: %+v", len(ts), ts)
	}
	if ts[0].goal != "PPOCR_CLS server at saturation ≥ 90% of the in-process loop (issue 20)" || !ts[0].known || !ts[0].met ||
		ts[0].measured != "batching off 95% (CPU 96%), batching on 91% (CPU 96%) of in-process" {
		t.Fatalf("PPOCR_CLS target %+v", ts[0])
	}
	if !strings.HasPrefix(ts[1].goal, "BLAZEFACE ") || !ts[1].known || ts[1].met {
		t.Fatalf("BLAZEFACE (84%% batching on) must miss: %+v", ts[1])
	}
	if none := ppocrTargets("no table"); len(none) != 1 || none[0].known {
		t.Fatalf("without a table: %+v, want one unknown target", none)
	}
}
