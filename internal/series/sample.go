package series

import (
	"context"
	"time"
)

// Run calls sample at once and then every interval until ctx ends. A
// sample that takes longer than the interval delays the next one rather
// than overlapping it, so one process never scrapes a target twice at once.
func Run(ctx context.Context, interval time.Duration, sample func(ctx context.Context, now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sample(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A select with both cases ready picks one at random, so a
			// tick that raced the cancel must not sample again.
			if ctx.Err() != nil {
				return
			}
		}
	}
}
