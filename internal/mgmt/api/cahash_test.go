package api

import (
	"encoding/pem"
	"testing"
)

func TestCAHash(t *testing.T) {
	der := []byte("not really a certificate, the hash does not care")
	h := CAHash(der)
	if len(h) != 32 {
		t.Fatalf("CAHash = %q, want 32 hex digits", h)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("k")})
	for _, c := range []struct {
		name string
		pem  []byte
		want string
	}{
		{"cert", cert, h},
		{"key first", append(append([]byte{}, key...), cert...), h},
		{"no cert", key, ""},
		{"not PEM", der, ""},
		{"empty", nil, ""},
	} {
		if got := CAHashPEM(c.pem); got != c.want {
			t.Errorf("%s: CAHashPEM = %q, want %q", c.name, got, c.want)
		}
	}
}
