package clustercfg

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// bigConfig is 1,000 services with 10,000 real servers (the benchmark's
// size) and 3 directors.
func bigConfig() []byte {
	var b strings.Builder
	b.WriteString("directors:\n  - name: d1\n  - name: d2\n  - name: d3\nservices:\n")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, "  - name: s%d\n    vip: 10.1.%d.%d:80\n    servers:\n", i, i/250, i%250+1)
		for j := 0; j < 10; j++ {
			fmt.Fprintf(&b, "      - address: 10.2.%d.%d:8080\n", i/25, (i%25)*10+j+1)
		}
	}
	return []byte(b.String())
}

func TestBigConfig(t *testing.T) {
	doc := bigConfig()
	start := time.Now()
	c, err := Parse("big.yaml", doc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c.Services[500].Scheduler = "rr"
	m2, _ := c.Marshal()
	d := Diff(m, m2)
	if !strings.Contains(d, "+    scheduler: rr") {
		t.Fatalf("diff:\n%s", d)
	}
	t.Logf("%d bytes: parse+marshal+diff %v", len(doc), time.Since(start))
}

func BenchmarkParseBig(b *testing.B) {
	doc := bigConfig()
	for b.Loop() {
		if _, err := Parse("big.yaml", doc); err != nil {
			b.Fatal(err)
		}
	}
}
