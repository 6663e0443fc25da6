package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"go.yaml.in/yaml/v3"
)

// A tiny stand-in for the station (internal/mgmt builds the real one):
// join with tokens, long-polled desired state, reports.

type fakeStation struct {
	t      *testing.T
	addr   string
	caPEM  []byte
	caHash string
	cert   tls.Certificate

	mu      sync.Mutex
	srv     *httptest.Server
	stop    chan struct{}
	tokens  map[string]string // token -> refusal ("" : good)
	creds   map[string]bool
	joins   int
	rev     int64
	version int64
	yaml    string
	drained []string
	changed chan struct{} // closed and replaced on every change
	reports []api.MemberStatus
}

func newCA(t *testing.T, host string) (caPEM []byte, caDER []byte, leaf tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test station CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err = x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "station"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(host)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf = tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), caDER, leaf
}

func newFakeStation(t *testing.T, host string) *fakeStation {
	return newFakeStationCert(t, host, host)
}

// newFakeStationCert is a station on host with a certificate for certHost.
func newFakeStationCert(t *testing.T, host, certHost string) *fakeStation {
	caPEM, caDER, leaf := newCA(t, certHost)
	f := &fakeStation{t: t, addr: host + ":0", caPEM: caPEM, caHash: api.CAHash(caDER), cert: leaf,
		tokens: map[string]string{}, creds: map[string]bool{}, changed: make(chan struct{})}
	f.up()
	t.Cleanup(f.down)
	return f
}

func (f *fakeStation) url() string { return "https://" + f.addr }

// token makes a good (msg "") or refused token.
func (f *fakeStation) token(id, msg string) string {
	tok := id + ".s3cret." + f.caHash
	f.mu.Lock()
	f.tokens[tok] = msg
	f.mu.Unlock()
	return tok
}

func (f *fakeStation) up() {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{f.cert}}
	f.mu.Lock()
	f.stop = make(chan struct{})
	f.srv = srv
	f.mu.Unlock()
	srv.StartTLS()
}

func (f *fakeStation) down() {
	f.mu.Lock()
	srv := f.srv
	if srv != nil {
		close(f.stop)
		f.srv = nil
	}
	f.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

func (f *fakeStation) set(version int64, yaml string, drained ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	f.version, f.yaml, f.drained = version, yaml, drained
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeStation) revoke() {
	f.mu.Lock()
	f.creds = map[string]bool{}
	f.mu.Unlock()
}

func (f *fakeStation) joined() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.joins
}

func (f *fakeStation) lastReport() (api.MemberStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reports) == 0 {
		return api.MemberStatus{}, false
	}
	return f.reports[len(f.reports)-1], true
}

func fail(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(api.Error{Error: msg})
}

func (f *fakeStation) serve(w http.ResponseWriter, r *http.Request) {
	bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	f.mu.Lock()
	okCred := f.creds[bearer]
	stop := f.stop
	f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == api.RouteJoin:
		var req api.JoinRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, 400, err.Error())
			return
		}
		f.mu.Lock()
		msg, known := f.tokens[bearer]
		if !known || msg != "" {
			f.mu.Unlock()
			if !known {
				msg = "unknown join token"
			}
			fail(w, 401, msg)
			return
		}
		f.joins++
		cred := "cred-" + req.Name + "-" + strconv.Itoa(f.joins)
		f.creds[cred] = true
		f.mu.Unlock()
		json.NewEncoder(w).Encode(api.JoinReply{Member: req.Name, Credential: cred, CA: string(f.caPEM),
			Secret: []byte("fs-credential"), Meta: []string{"127.0.54.9:7400"}, Stations: []string{f.addr}})
	case !okCred:
		fail(w, 401, "unknown credential")
	case r.Method == http.MethodGet && r.URL.Path == api.RouteDesired:
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		wait = min(wait, 5*time.Second)
		f.mu.Lock()
		ch := f.changed
		rev := f.rev
		f.mu.Unlock()
		if rev <= after {
			select {
			case <-ch:
			case <-time.After(wait):
			case <-stop:
				return
			case <-r.Context().Done():
				return
			}
		}
		f.mu.Lock()
		d := api.Desired{Rev: f.rev, Version: f.version, YAML: f.yaml, Drained: f.drained}
		f.mu.Unlock()
		json.NewEncoder(w).Encode(d)
	case r.Method == http.MethodPost && r.URL.Path == api.RouteReport:
		var st api.MemberStatus
		if err := json.NewDecoder(r.Body).Decode(&st); err != nil {
			fail(w, 400, err.Error())
			return
		}
		f.mu.Lock()
		f.reports = append(f.reports, st)
		f.mu.Unlock()
	default:
		fail(w, 404, "no route "+r.URL.Path)
	}
}

// useParser stands in for clustercfg.Parse while it is not built (plain
// YAML into the types, no validation).
func useParser(t *testing.T) {
	if _, err := clustercfg.Parse("probe", []byte("services: []\n")); err == nil || !strings.Contains(err.Error(), "not built") {
		return
	}
	old := parse
	parse = func(file string, data []byte) (*clustercfg.Config, error) {
		var c clustercfg.Config
		if err := yaml.Unmarshal(data, &c); err != nil {
			return nil, err
		}
		return &c, nil
	}
	t.Cleanup(func() { parse = old })
}
