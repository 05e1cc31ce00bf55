package main

import (
	"context"
	"fmt"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/scale"
)

func runScale(ctx context.Context, cfg config) (string, []target, error) {
	bt := "1s"
	if cfg.d < 3e9 {
		bt = "200ms"
	}
	r, err := scale.Run(ctx, cfg.root, bt)
	if err != nil {
		return "", nil, err
	}
	return r.Markdown, []target{{goal: "route rebuild cost vs cluster size (issue 13)", known: true, info: true,
		measured: fmt.Sprintf("%s ms per rebuild at %s", harness.Ms(r.Largest), r.LargestName)}}, nil
}
