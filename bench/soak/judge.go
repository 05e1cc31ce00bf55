package soak

import (
	"slices"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// judge gives every result its verdict. A failure is a clean one when a
// fault that is allowed to fail requests hit a component on the
// request's path while the request ran: from the fault's start to its
// recovery (or, when it never recovered, its end plus its bound), plus
// attributionSlack.
func judge(results []record.Result, faults []record.Fault) {
	for i := range results {
		r := &results[i]
		switch {
		case r.Defect:
			r.Outcome = record.Defect
		case !r.Failed:
			r.Outcome = record.Served
		default:
			r.Outcome = record.Unattributed
			if f := blame(*r, faults); f != nil {
				r.Outcome, r.Blame = record.CleanFail, f.Kind
			}
		}
	}
}

func blame(r record.Result, faults []record.Fault) *record.Fault {
	for i := range faults {
		f := &faults[i]
		if lossless(f.Kind) || !slices.Contains(r.Path, f.Target) || (len(r.Only) > 0 && !slices.Contains(r.Only, f.Kind)) {
			continue
		}
		to := f.Recovered
		if to.IsZero() {
			to = f.End.Add(f.Bound)
			if f.End.IsZero() {
				to = f.Start.Add(recoverCap)
			}
		}
		if r.Start.Before(to.Add(attributionSlack)) && !r.End.Before(f.Start) {
			return f
		}
	}
	return nil
}
