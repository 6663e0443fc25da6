package node

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestServeReadOnlyCredential: a node holding only the read-only credential
// (what corral up gives it) serves whole files and ranges.
func TestServeReadOnlyCredential(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr, client.WithSecurity(proto.Security{Cred: fsys.Cred}))
	defer cl.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 200<<10)
	put(t, cl, "/www/a.test/big.bin", big)
	s := New(Config{Meta: fsys.Meta.Addr, Security: proto.Security{Cred: fsys.Cred.ReadOnly()}})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, rng := range []string{"", "bytes=1000-1999"} {
		req, _ := http.NewRequest("GET", srv.URL+"/big.bin", nil)
		req.Host = "a.test"
		want := big
		if rng != "" {
			req.Header.Set("Range", rng)
			want = big[1000:2000]
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 || !bytes.Equal(body, want) {
			t.Fatalf("GET %q with the read-only credential: %d, %d bytes", rng, resp.StatusCode, len(body))
		}
	}
}
