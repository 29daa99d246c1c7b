package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The chart's geometry, in SVG user units: the plot area sits inside the
// margins, the left axis for completions a second, the right for latency.
const (
	svgWidth, svgHeight = 720, 420
	svgLeft, svgRight   = 70, 650 // the plot's x extent
	svgTop, svgBottom   = 50, 360 // the plot's y extent
)

// svg draws the complete steps' completions a second and p50 latency
// against concurrency (a log scale: the levels grow by a factor), on two
// y axes, with the knee marked. It is hand-written SVG 1.1; the series
// are the polylines with ids "completions" and "latency".
func (r sweepResult) svg() []byte {
	var pts []step
	for _, s := range r.steps {
		if s.complete() && s.answered > 0 {
			pts = append(pts, s)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<title>meterproxy sweep: throughput and latency against concurrency</title>
<rect width="100%%" height="100%%" fill="white"/>
<text x="%d" y="24" font-size="15">meterproxy sweep: completions/s (blue, left) and p50 latency (orange, right)</text>
`, svgWidth, svgHeight, svgWidth, svgHeight, svgLeft)
	if len(pts) == 0 {
		b.WriteString("<text x=\"70\" y=\"200\">no step completed</text>\n</svg>\n")
		return []byte(b.String())
	}
	x := svgX(pts)
	var topRate float64
	var topLat time.Duration
	for _, s := range pts {
		topRate = max(topRate, s.completionsPerMin/60)
		topLat = max(topLat, s.p50)
	}
	rateMax, latMax := niceCeil(topRate), niceCeil(topLat.Seconds()*1000)
	yRate := func(v float64) float64 { return svgBottom - v/rateMax*(svgBottom-svgTop) }
	yLat := func(ms float64) float64 { return svgBottom - ms/latMax*(svgBottom-svgTop) }
	svgAxes(&b, pts, x, rateMax, latMax)
	if at, _, ok := knee(r.steps); ok {
		kx := x(r.steps[at].concurrency)
		fmt.Fprintf(&b, `<line id="knee" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="gray" stroke-dasharray="5,4"/>
<text x="%.1f" y="%d" text-anchor="middle">knee = bound %d</text>
`, kx, svgTop, kx, svgBottom, kx, svgTop-6, r.steps[at].concurrency)
	}
	series := func(id, color string, y func(step) float64) {
		var coords []string
		for _, s := range pts {
			coords = append(coords, fmt.Sprintf("%.1f,%.1f", x(s.concurrency), y(s)))
		}
		fmt.Fprintf(&b, "<polyline id=%q fill=\"none\" stroke=%q stroke-width=\"2\" points=%q/>\n", id, color, strings.Join(coords, " "))
		for _, c := range coords {
			cx, cy, _ := strings.Cut(c, ",")
			fmt.Fprintf(&b, "<circle cx=%q cy=%q r=\"3\" fill=%q/>\n", cx, cy, color)
		}
	}
	series("completions", "#1f77b4", func(s step) float64 { return yRate(s.completionsPerMin / 60) })
	series("latency", "#ff7f0e", func(s step) float64 { return yLat(s.p50.Seconds() * 1000) })
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// svgX maps a concurrency to its x on a log scale spanning pts; a single
// step sits in the middle.
func svgX(pts []step) func(int) float64 {
	lo, hi := math.Log(float64(pts[0].concurrency)), math.Log(float64(pts[len(pts)-1].concurrency))
	return func(c int) float64 {
		if hi == lo {
			return (svgLeft + svgRight) / 2
		}
		return svgLeft + (math.Log(float64(c))-lo)/(hi-lo)*(svgRight-svgLeft)
	}
}

// svgAxes draws the frame, a tick and label per step's concurrency, and
// five ticks on each y axis.
func svgAxes(b *strings.Builder, pts []step, x func(int) float64, rateMax, latMax float64) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>
<text x="%d" y="%d" text-anchor="middle">concurrency (log scale)</text>
<text x="20" y="%d" transform="rotate(-90 20 %d)" text-anchor="middle" fill="#1f77b4">completions/s</text>
<text x="%d" y="%d" transform="rotate(90 %d %d)" text-anchor="middle" fill="#ff7f0e">p50 latency (ms)</text>
`, svgLeft, svgTop, svgRight-svgLeft, svgBottom-svgTop,
		(svgLeft+svgRight)/2, svgBottom+40,
		(svgTop+svgBottom)/2, (svgTop+svgBottom)/2,
		svgWidth-20, (svgTop+svgBottom)/2, svgWidth-20, (svgTop+svgBottom)/2)
	for _, s := range pts {
		cx := x(s.concurrency)
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/><text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
			cx, svgBottom, cx, svgBottom+5, cx, svgBottom+18, s.concurrency)
	}
	for i := range 6 {
		y := svgBottom - float64(i)/5*(svgBottom-svgTop)
		fmt.Fprintf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", svgLeft, y, svgRight, y)
		fmt.Fprintf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", svgLeft-6, y+4, fmtTick(rateMax*float64(i)/5))
		fmt.Fprintf(b, "<text x=\"%d\" y=\"%.1f\">%s</text>\n", svgRight+6, y+4, fmtTick(latMax*float64(i)/5))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so the axes'
// fifths are round numbers; 1 for nothing.
func niceCeil(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// fmtTick prints an axis value without needless decimals.
func fmtTick(v float64) string {
	switch {
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2g", v)
}
