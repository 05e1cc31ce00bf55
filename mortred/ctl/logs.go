package ctl

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"time"
)

type logPage struct {
	Offset int64    `json:"offset"`
	Total  int64    `json:"total"`
	Lines  []string `json:"lines"`
}

func (c *CLI) logs(args []string) error {
	var offset, limit int64
	var follow bool
	pos, err := c.subFlags("logs", args, func(fs *flag.FlagSet) {
		fs.Int64Var(&offset, "offset", -1, "first line number (default: the last --limit lines)")
		fs.Int64Var(&limit, "limit", 200, "lines per page (1-1000)")
		fs.BoolVar(&follow, "follow", false, "keep printing new lines")
	})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"logs takes one server id"}
	}
	if limit < 1 || limit > 1000 {
		return usageError{"--limit must be from 1 to 1000"}
	}
	id := url.PathEscape(pos[0])
	page := func(off int64) (logPage, error) {
		var p logPage
		err := c.call("GET", fmt.Sprintf("/api/v1/servers/%s/logs?offset=%d&limit=%d", id, off, limit), &p)
		return p, err
	}
	if offset < 0 {
		// Find the end, then show the last page.
		p, err := page(1 << 62)
		if err != nil {
			return err
		}
		offset = max(0, p.Total-limit)
	}
	for {
		p, err := page(offset)
		if err != nil {
			return err
		}
		if c.G.JSON {
			b, _ := json.Marshal(p)
			fmt.Fprintln(c.Out, string(b))
		} else {
			for _, l := range p.Lines {
				fmt.Fprintln(c.Out, l)
			}
		}
		offset = p.Offset + int64(len(p.Lines))
		if !follow {
			return nil
		}
		if int64(len(p.Lines)) < limit {
			time.Sleep(500 * time.Millisecond)
		}
	}
}
