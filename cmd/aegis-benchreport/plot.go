package main

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// The plot: two panels sharing the x axis (calls in flight, log 2), the
// latency of a tools/call (log 10, ms) and the calls per second, one line
// per configuration of BenchmarkWrapInflight.

const (
	plotW, plotH = 960, 490
	panelTop     = 78
	panelH       = 300
	panelW       = 370
	leftX        = 75
	rightX       = 540
)

var palette = []string{"#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"}

func describe(config string) string {
	switch {
	case config == "direct":
		return "direct: the example server, one connection"
	case config == "wrap":
		return "aegis wrap, one connection"
	case strings.HasPrefix(config, "wrap×"):
		return strings.TrimPrefix(config, "wrap×") + " aegis wrap processes at once (own state dirs, same disk)"
	}
	return config
}

type svgBuf struct{ strings.Builder }

func (s *svgBuf) f(format string, args ...any) { fmt.Fprintf(s, format+"\n", args...) }

func esc(s string) string { return html.EscapeString(s) }

func fmtTick(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// logTicks returns 1, 2, 5 × 10^k within [lo, hi].
func logTicks(lo, hi float64) []float64 {
	var t []float64
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * d; v >= lo*0.999 && v <= hi*1.001 {
				t = append(t, v)
			}
		}
	}
	return t
}

// niceLog returns the 1, 2 or 5 × 10^k next to v: the least at or above it
// (up) or the greatest at or below it.
func niceLog(v float64, up bool) float64 {
	d := math.Pow(10, math.Floor(math.Log10(v)))
	if up {
		for _, m := range []float64{1, 2, 5, 10} {
			if m*d >= v*0.999 {
				return m * d
			}
		}
		return 10 * d
	}
	for _, m := range []float64{5, 2, 1} {
		if m*d <= v*1.001 {
			return m * d
		}
	}
	return d
}

// niceStep returns a step of 1, 2 or 5 × 10^k that cuts [0, hi] in about n.
func niceStep(hi float64, n int) float64 {
	raw := hi / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func plotSVG(rep *report) []byte {
	var s svgBuf
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, plotW, plotH, plotW, plotH)
	s.f(`<rect width="100%%" height="100%%" fill="white"/>`)
	runs := 0
	for _, p := range rep.Sweep {
		runs = max(runs, p.Runs)
	}
	s.f(`<text x="%d" y="24" font-size="16" font-weight="bold">tools/call echo through aegis wrap against calls in flight</text>`, leftX)
	sub := fmt.Sprintf("median of %d run(s) of make bench; bars: min–max of the runs", runs)
	if len(rep.Env) > 0 && rep.Env[0] != nil {
		sub += fmt.Sprintf("; %v cores, %v", rep.Env[0]["nproc"], rep.Env[0]["cpu"])
	}
	s.f(`<text x="%d" y="44" fill="#444">%s</text>`, leftX, esc(sub))
	if len(rep.Sweep) == 0 {
		s.f(`<text x="%d" y="%d">no BenchmarkWrapInflight data</text>`, leftX, panelTop+40)
		s.f(`</svg>`)
		return []byte(s.String())
	}

	var configs []string
	byConfig := map[string][]*sweepSummary{}
	xMin, xMax := math.Inf(1), math.Inf(-1)
	yMin, yMax, cMax := math.Inf(1), math.Inf(-1), 0.0
	for _, p := range rep.Sweep {
		if _, ok := byConfig[p.Config]; !ok {
			configs = append(configs, p.Config)
		}
		byConfig[p.Config] = append(byConfig[p.Config], p)
		x := float64(p.InFlight)
		xMin, xMax = math.Min(xMin, x), math.Max(xMax, x)
		yMin = math.Min(yMin, p.P50Min/1000)
		yMax = math.Max(yMax, math.Max(p.P99, p.P50Max)/1000)
		cMax = math.Max(cMax, p.CPSMax)
	}
	color := func(config string) string {
		for i, c := range configs {
			if c == config {
				return palette[i%len(palette)]
			}
		}
		return "black"
	}
	lx0, lx1 := math.Log2(xMin)-0.3, math.Log2(xMax)+0.3
	xpos := func(x0 int, v float64) float64 {
		return float64(x0) + (math.Log2(v)-lx0)/(lx1-lx0)*panelW
	}
	yLo, yHi := niceLog(yMin, false), niceLog(yMax, true)
	ylat := func(ms float64) float64 {
		return panelTop + panelH - (math.Log10(ms)-math.Log10(yLo))/(math.Log10(yHi)-math.Log10(yLo))*panelH
	}
	cStep := niceStep(cMax*1.05, 5)
	cHi := math.Ceil(cMax*1.05/cStep) * cStep
	ycps := func(v float64) float64 { return panelTop + panelH - v/cHi*panelH }

	// Frames, grids and axes.
	xticks := []float64{}
	for v := 1.0; v <= xMax; v *= 2 {
		if v >= xMin {
			xticks = append(xticks, v)
		}
	}
	for _, x0 := range []int{leftX, rightX} {
		s.f(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`, x0, panelTop, panelW, panelH)
		for _, v := range xticks {
			x := xpos(x0, v)
			s.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, panelTop, x, panelTop+panelH)
			s.f(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, panelTop+panelH+16, fmtTick(v))
		}
		s.f(`<text x="%d" y="%d" text-anchor="middle">calls in flight (in all)</text>`, x0+panelW/2, panelTop+panelH+34)
	}
	for _, v := range logTicks(yLo, yHi) {
		y := ylat(v)
		s.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`, leftX, y, leftX+panelW, y)
		s.f(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`, leftX-6, y+4, fmtTick(v))
	}
	s.f(`<text transform="translate(%d %d) rotate(-90)" text-anchor="middle">latency, ms (log scale): p50 solid, p99 dashed</text>`, leftX-48, panelTop+panelH/2)
	for v := 0.0; v <= cHi+cStep/2; v += cStep {
		y := ycps(v)
		s.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`, rightX, y, rightX+panelW, y)
		s.f(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`, rightX-6, y+4, fmtTick(v))
	}
	s.f(`<text transform="translate(%d %d) rotate(-90)" text-anchor="middle">calls per second</text>`, rightX-48, panelTop+panelH/2)
	s.f(`<text x="%d" y="%d" font-weight="bold">latency of one call</text>`, leftX+6, panelTop-8)
	s.f(`<text x="%d" y="%d" font-weight="bold">throughput</text>`, rightX+6, panelTop-8)

	// Data.
	for _, c := range configs {
		pts := byConfig[c]
		col := color(c)
		var p50, p99, cps []string
		for _, p := range pts {
			x, xr := xpos(leftX, float64(p.InFlight)), xpos(rightX, float64(p.InFlight))
			p50 = append(p50, fmt.Sprintf("%.1f,%.1f", x, ylat(p.P50/1000)))
			p99 = append(p99, fmt.Sprintf("%.1f,%.1f", x, ylat(p.P99/1000)))
			cps = append(cps, fmt.Sprintf("%.1f,%.1f", xr, ycps(p.CallsPerS)))
			if p.Runs > 1 {
				s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, x, ylat(p.P50Min/1000), x, ylat(p.P50Max/1000), col)
				s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, xr, ycps(p.CPSMin), xr, ycps(p.CPSMax), col)
			}
			s.f(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, %d in flight: p50 %.0f µs, p99 %.0f µs</title></circle>`,
				x, ylat(p.P50/1000), col, esc(c), p.InFlight, p.P50, p.P99)
			s.f(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, %d in flight: %.0f calls/s</title></circle>`,
				xr, ycps(p.CallsPerS), col, esc(c), p.InFlight, p.CallsPerS)
		}
		s.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(p50, " "), col)
		s.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.2" stroke-dasharray="5 4"/>`, strings.Join(p99, " "), col)
		s.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(cps, " "), col)
	}

	// Legend.
	ly := panelTop + panelH + 56
	for i, c := range configs {
		x, y := leftX, ly+i*18
		s.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`, x, y-4, x+24, y-4, color(c))
		s.f(`<circle cx="%d" cy="%d" r="3.5" fill="%s"/>`, x+12, y-4, color(c))
		s.f(`<text x="%d" y="%d">%s</text>`, x+32, y, esc(describe(c)))
	}
	s.f(`</svg>`)
	return []byte(s.String())
}
