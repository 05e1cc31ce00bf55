package harness

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Pct is the q-quantile (0..1) of ds by nearest rank; 0 when ds is empty.
// ds is sorted in place.
func Pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// Median is the middle of xs (the mean of the two middles for an even
// count); 0 when empty. xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Ms formats d in milliseconds with enough digits for sub-millisecond
// differences.
func Ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

// Ratio formats a/b as "1.23×", or "–" when b is zero.
func Ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// Table renders a Markdown table. Columns after the first are right-aligned
// when align is true.
func Table(header []string, rows [][]string, alignRight bool) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for i := range header {
		if alignRight && i > 0 {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Bytes formats n as KiB or MiB.
func Bytes(n float64) string {
	switch {
	case n >= 1<<20 || n <= -(1<<20):
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case n >= 1<<10 || n <= -(1<<10):
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}
