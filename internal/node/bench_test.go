package node

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// BenchmarkServeSmall: one 1 KiB file served, handler and file system
// (meta and an iod on loopback), without the network in front; with the
// data cache off (stat, open, read from the iod) and on (stat only).
func BenchmarkServeSmall(b *testing.B) {
	fsys := pfstest.Start(b, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(b, cl, "/www/a.test/small.html", make([]byte, 1024))
	for _, dc := range []int64{0, DefaultDataCache} {
		b.Run(fmt.Sprintf("cache=%dM", dc>>20), func(b *testing.B) { serveSmall(b, fsys.Meta.Addr, dc) })
	}
}

func serveSmall(b *testing.B, meta string, dc int64) {
	s := New(Config{Meta: meta, DefaultDomain: "a.test", DataCache: dc})
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "http://a.test/small.html", nil))
		if w.Code != 200 || w.Body.Len() != 1024 {
			b.Fatalf("%d, %d bytes", w.Code, w.Body.Len())
		}
	}
}
