package node

import (
	"net/http/httptest"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// BenchmarkServeSmall: one 1 KiB file served, handler and file system
// (meta and an iod on loopback), without the network in front.
func BenchmarkServeSmall(b *testing.B) {
	fsys := pfstest.Start(b, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(b, cl, "/www/a.test/small.html", make([]byte, 1024))
	s := New(Config{Meta: fsys.Meta.Addr, DefaultDomain: "a.test"})
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "http://a.test/small.html", nil))
		if w.Code != 200 || w.Body.Len() != 1024 {
			b.Fatalf("%d, %d bytes", w.Code, w.Body.Len())
		}
	}
}
