package sched

import (
	"fmt"
	"net/netip"
	"testing"
)

func BenchmarkPick(b *testing.B) {
	s := make([]Server, 8)
	for i := range s {
		s[i] = Server{Key: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: 1 + i%3, Active: i}
	}
	for _, name := range []string{"wlc", "sh", "mh"} {
		sc, _ := New(name)
		src := netip.MustParseAddr("192.0.2.7")
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sc.Pick(s, Flow{Src: src})
			}
		})
	}
}
