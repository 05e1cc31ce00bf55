package report

import (
	"image/color"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

const (
	// Every chart has the same size and the same legend column, so that
	// stacked in the report their x axes line up and a fault can be
	// followed from one to the next.
	chartWidth  = 9 * vg.Inch
	chartHeight = 3.5 * vg.Inch
	chartDPI    = 96
	legendWidth = 1.9 * vg.Inch
	// bucket is the resolution of the request charts: long enough for a
	// p99 to rest on more than a handful of requests, short enough to
	// show a 5 s router restart.
	bucket = 10 * time.Second
)

// series is one line of a chart, x in seconds since the run's start.
type series struct {
	name string
	xys  plotter.XYs
}

type chartSpec struct {
	file, title, ylabel string
	series              []series
	yMax                float64 // fixed top of the y axis; 0: from the data
	empty               string  // why the chart is skipped when it has no series
}

func chartSpecs(in Input) []chartSpec {
	return []chartSpec{
		{file: "success.png", title: "Success rate (served / all requests, per 10 s by end time)", ylabel: "% served",
			series: successSeries(in), yMax: 100, empty: "no requests recorded"},
		{file: "latency-p99.png", title: "p99 latency of served requests, late-polled jobs aside (per 10 s by end time)", ylabel: "seconds",
			series: latencySeries(in), empty: "no served requests recorded"},
		{file: "rss.png", title: "RSS per process", ylabel: "MiB",
			series: sampleSeries(in, func(s record.Sample) (float64, bool) { return mib(s.RSS), s.RSS > 0 }), empty: "no samples recorded"},
		{file: "fds.png", title: "Open descriptors per process", ylabel: "descriptors",
			series: sampleSeries(in, func(s record.Sample) (float64, bool) { return float64(s.FDs), s.FDs >= 0 }), empty: "no samples recorded"},
	}
}

func secs(in Input, t time.Time) float64 { return t.Sub(in.Start).Seconds() }

// buckets groups results by the 10 s bucket of their end, when their
// effect on a client is known.
func buckets(in Input, keep func(record.Result) bool) map[int][]record.Result {
	m := map[int][]record.Result{}
	for _, r := range in.Results {
		if r.End.IsZero() || !keep(r) {
			continue
		}
		i := int(math.Floor(r.End.Sub(in.Start).Seconds() / bucket.Seconds()))
		m[i] = append(m[i], r)
	}
	return m
}

func bucketX(i int) float64 { return (float64(i) + 0.5) * bucket.Seconds() }

func successSeries(in Input) []series {
	m := buckets(in, func(record.Result) bool { return true })
	if len(m) == 0 {
		return nil
	}
	var xys plotter.XYs
	for _, i := range sortedKeys(m) {
		served := countOutcome(m[i], record.Served)
		xys = append(xys, plotter.XY{X: bucketX(i), Y: 100 * float64(served) / float64(len(m[i]))})
	}
	return []series{{name: "served", xys: xys}}
}

func latencySeries(in Input) []series {
	// Late-polled jobs wait 30–120 s on purpose: their time says nothing
	// about how fast anything answered.
	m := buckets(in, func(r record.Result) bool {
		return r.Outcome == record.Served && !r.Start.IsZero() && !strings.HasPrefix(r.Kind, LatePrefix)
	})
	if len(m) == 0 {
		return nil
	}
	var xys plotter.XYs
	for _, i := range sortedKeys(m) {
		ls := make([]float64, len(m[i]))
		for j, r := range m[i] {
			ls[j] = r.End.Sub(r.Start).Seconds()
		}
		xys = append(xys, plotter.XY{X: bucketX(i), Y: p99(ls)})
	}
	return []series{{name: "p99", xys: xys}}
}

// p99 is the nearest-rank percentile: a latency some request actually
// had, not an interpolation between two.
func p99(ls []float64) float64 {
	sort.Float64s(ls)
	i := int(math.Ceil(0.99*float64(len(ls)))) - 1
	return ls[max(i, 0)]
}

// sampleSeries draws one line per process name across its PIDs, so a
// restart shows as the drop it is.
func sampleSeries(in Input, val func(record.Sample) (float64, bool)) []series {
	by := samplesByProc(in)
	var out []series
	for _, name := range sortedKeys(by) {
		ss := by[name]
		sortSamples(ss)
		var xys plotter.XYs
		for _, s := range ss {
			if v, ok := val(s); ok && !s.At.IsZero() {
				xys = append(xys, plotter.XY{X: secs(in, s.At), Y: v})
			}
		}
		if len(xys) > 0 {
			out = append(out, series{name: name, xys: xys})
		}
	}
	return out
}

// faultKinds fixes one colour per fault kind across all charts.
func faultKinds(fs []record.Fault) map[string]int {
	set := map[string]bool{}
	for _, f := range fs {
		set[f.Kind] = true
	}
	m := map[string]int{}
	for i, k := range sortedKeys(set) {
		m[k] = i
	}
	return m
}

func faultColor(i int, alpha uint8) color.Color {
	r, g, b, _ := plotutil.SoftColors[i%len(plotutil.SoftColors)].RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: alpha}
}

// faultMarks shades each fault across the full height of the data area;
// it has no DataRange so it never stretches the y axis.
type faultMarks struct {
	in    Input
	kinds map[string]int
}

func (m faultMarks) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, _ := plt.Transforms(&c)
	for _, f := range m.in.Faults {
		if f.Start.IsZero() {
			continue
		}
		k := m.kinds[f.Kind]
		x0 := trX(secs(m.in, f.Start))
		x1 := trX(plt.X.Max)
		if !f.End.IsZero() {
			x1 = trX(secs(m.in, f.End))
		}
		span := c.ClipPolygonX([]vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
		if len(span) > 0 {
			c.FillPolygon(faultColor(k, 70), span)
		}
		if c.ContainsX(x0) {
			c.StrokeLine2(draw.LineStyle{Color: faultColor(k, 255), Width: vg.Points(0.7)}, x0, c.Min.Y, x0, c.Max.Y)
		}
	}
}

// swatch is a fault kind's legend thumbnail, drawn as its span is.
type swatch struct{ k int }

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(faultColor(s.k, 70), []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}})
	c.StrokeLine2(draw.LineStyle{Color: faultColor(s.k, 255), Width: vg.Points(0.7)}, c.Min.X, c.Min.Y, c.Min.X, c.Max.Y)
}

func drawChart(file string, spec chartSpec, in Input) error {
	p := plot.New()
	p.Title.Text = spec.title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Title.Padding = vg.Points(4)
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = spec.ylabel
	kinds := faultKinds(in.Faults)
	p.Add(faultMarks{in: in, kinds: kinds})
	p.Add(plotter.NewGrid())

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(16)
	for i, s := range spec.series {
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return err
		}
		// Seven colours, then the next dash pattern: fifteen processes
		// stay distinguishable.
		l.Color = plotutil.DarkColors[i%len(plotutil.DarkColors)]
		l.Dashes = plotutil.Dashes(i / len(plotutil.DarkColors))
		l.Width = vg.Points(1.2)
		p.Add(l)
		if len(s.xys) == 1 {
			// A lone point draws no line; mark it.
			sc, err := plotter.NewScatter(s.xys)
			if err != nil {
				return err
			}
			sc.Color = l.Color
			p.Add(sc)
		}
		legend.Add(s.name, l)
	}
	for _, k := range sortedKeys(kinds) {
		legend.Add("fault: "+k, swatch{kinds[k]})
	}

	xmax := in.Duration.Seconds()
	for _, f := range in.Faults {
		if !f.Start.IsZero() {
			xmax = math.Max(xmax, secs(in, f.Start))
		}
	}
	p.X.Min = math.Min(p.X.Min, 0)
	p.X.Max = math.Max(p.X.Max, xmax)
	p.Y.Min = 0
	if spec.yMax > 0 {
		p.Y.Max = spec.yMax
	}
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	// Headroom, so a line at the top is not lost in the frame.
	p.Y.Max *= 1.04

	img := vgimg.NewWith(vgimg.UseWH(chartWidth, chartHeight), vgimg.UseDPI(chartDPI))
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	lc := draw.Crop(dc, chartWidth-legendWidth+vg.Points(6), 0, vg.Points(4), -vg.Points(8))
	fitLegend(&legend, lc)
	legend.Draw(lc)

	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fitLegend shrinks the legend's font until every entry fits the
// column, down to a size that is still legible.
func fitLegend(l *plot.Legend, c draw.Canvas) {
	for size := 8.0; size >= 5; size -= 0.5 {
		l.TextStyle.Font.Size = vg.Points(size)
		r := l.Rectangle(c)
		if r.Max.Y-r.Min.Y <= c.Max.Y-c.Min.Y {
			return
		}
	}
}
