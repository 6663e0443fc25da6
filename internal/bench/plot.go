package bench

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"}

// LineChart writes a small SVG line chart: enough to compare shapes with the
// papers' figures without a plotting dependency.
func LineChart(path, title, xlabel, ylabel string, series []Series) error {
	const w, h, l, r, t, b = 640, 400, 70, 160, 40, 50
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range series {
		for i := range s.X {
			minX, maxX, maxY = math.Min(minX, s.X[i]), math.Max(maxX, s.X[i]), math.Max(maxY, s.Y[i])
		}
	}
	if maxX <= minX {
		maxX = minX + 1
	}
	if maxY <= 0 {
		maxY = 1
	}
	maxY *= 1.1
	px := func(x float64) float64 { return l + (x-minX)/(maxX-minX)*(w-l-r) }
	py := func(y float64) float64 { return h - b - y/maxY*(h-t-b) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="14">%s</text>`+"\n", l, esc(title))
	fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", l, h-b, w-r, h-b, l, t, l, h-b)
	for i := 0; i <= 5; i++ {
		y := maxY * float64(i) / 5
		x := minX + (maxX-minX)*float64(i)/5
		fmt.Fprintf(&sb, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, l-6, py(y)+4, num(y))
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(x), h-b+16, num(x))
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, (l+w-r)/2, h-12, esc(xlabel))
	fmt.Fprintf(&sb, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">%s</text>`+"\n", (t+h-b)/2, (t+h-b)/2, esc(ylabel))
	for i, s := range series {
		c := palette[i%len(palette)]
		var pts []string
		for k := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[k]), py(s.Y[k])))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6,4"`
		}
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", c, dash, strings.Join(pts, " "))
		for k := range s.X {
			fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, px(s.X[k]), py(s.Y[k]), c)
		}
		fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			w-r+10, t+10+i*18, w-r+30, t+10+i*18, c, dash, w-r+35, t+14+i*18, esc(s.Name))
	}
	sb.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

func num(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
