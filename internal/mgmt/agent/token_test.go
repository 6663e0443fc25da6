package agent

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
)

func TestParseToken(t *testing.T) {
	h := strings.Repeat("0f", 16)
	if tk, err := ParseToken(" id.sec." + strings.ToUpper(h) + "\n"); err != nil || tk.ID != "id" || tk.Secret != "sec" || tk.CAHash != h {
		t.Fatalf("good token: %+v %v", tk, err)
	}
	for _, bad := range []string{"", "a.b", "a.b.c.d", ".b." + h, "a.b.123", "a.b." + strings.Repeat("zz", 16)} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), ".b.") {
			t.Errorf("%q: the error repeats the secret: %v", bad, err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("id.secret." + strings.Repeat("ab", 16))
	f.Add("a..")
	f.Fuzz(func(t *testing.T, s string) {
		tk, err := ParseToken(s)
		// No CA hash is a token of a station without TLS (TestTokenWithoutCAHash).
		if err == nil && (tk.ID == "" || tk.Secret == "" || (tk.CAHash != "" && len(tk.CAHash) != 32)) {
			t.Fatalf("%q: accepted as %+v", s, tk)
		}
	})
}

// A station without TLS makes tokens with no CA hash: they parse (its
// members join over plain http), but an https station is not trusted on
// such a token.
func TestTokenWithoutCAHash(t *testing.T) {
	tk, err := ParseToken("id.sec.")
	if err != nil || tk.CAHash != "" {
		t.Fatalf("token of an insecure station: %+v %v", tk, err)
	}
	p := &pinned{hash: tk.CAHash}
	err = p.verify(tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: []byte{1}}}}, "127.0.0.1")
	if err == nil || !strings.Contains(err.Error(), "--station-ca") {
		t.Fatalf("https station trusted on a token without a CA hash: %v", err)
	}
}
