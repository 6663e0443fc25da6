// Package mgmt is the management station (`corral mgmt`, paper 001's EMS):
// the cluster configuration in etcd (an embedded member by default, or an
// external cluster), versioned, validated and handed to every member; the
// HTTP API under /v1 (package api) with accounts, tokens and an audit log;
// join; backup and restore; the dashboard; rolling upgrades. docs/mgmt.md.
//
// Files: store.go (etcd, versions, history, members), server.go (HTTP,
// TLS, routes), auth.go (users, tokens, roles), backup.go, dash.go and
// web/ (dashboard, events), upload.go (webmasters' files), rollout.go.
package mgmt

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// Options configure a station.
type Options struct {
	// Data is the station's directory: etcd's data (DATA/etcd), the CA and
	// server certificate (DATA/tls), the bootstrap admin token
	// (DATA/admin.token, 0600), uploaded binaries (DATA/binaries).
	Data string
	// Listen is the API's address (HTTPS). Default 127.0.0.1:7600.
	Listen string
	// Etcd, if set, are an external etcd cluster's client endpoints;
	// otherwise the station runs an embedded member with data in DATA/etcd.
	Etcd []string
	// EtcdCA, EtcdCert and EtcdKey (files) are the TLS of an external
	// cluster: the CA its server certificates are checked against, and
	// this station's client certificate and key (the key may not be
	// readable by group or others). EtcdUser and EtcdPassword are its
	// etcd auth credentials, if it has auth on.
	EtcdCA, EtcdCert, EtcdKey string
	EtcdUser, EtcdPassword    string
	// EtcdName, EtcdPeer, EtcdClient and EtcdInitialCluster set up the
	// embedded member; three stations form one etcd cluster by listing
	// each other in EtcdInitialCluster ("a=https://10.0.0.1:7602,b=...");
	// they must start with the same CA in DATA/tls (InitCA), the root of
	// their peers' trust. Defaults: name "station", peer 127.0.0.1:7602,
	// client 127.0.0.1:7601. Both listeners always take TLS 1.3 with
	// client certificates of the station's CA, loopback included, and
	// etcd's auth is on (docs/mgmt.md, "The station's etcd").
	EtcdName           string
	EtcdPeer           string
	EtcdClient         string
	EtcdInitialCluster string
	// TLSCert, TLSKey, TLSCA bring your own certificate; otherwise the
	// station makes a CA on first start (DATA/tls/ca.pem) and a server
	// certificate for Listen's host, 127.0.0.1, ::1 and localhost.
	TLSCert, TLSKey, TLSCA string
	// Insecure serves plain HTTP (tests of other packages only).
	Insecure bool
	// Secret is the file-system cluster secret (for meta and iods joining,
	// for the read-only credential of nodes, and for webmaster uploads);
	// nil: those parts are off and say so. It is the credential file's
	// text (proto.Credential.Marshal: "corral-secret full HEX").
	Secret []byte
	// Meta are the metadata members (for uploads and the I/O servers'
	// status); default: the configuration's filesystem.meta.
	Meta []string
	// Log receives events; nil: slog.Default().
	Log *slog.Logger
	// MemberTimeout: a member not heard from this long is down. Default 5 s.
	MemberTimeout time.Duration
}

// etcdStartTimeout bounds the wait for the embedded member (three
// stations: for the others to come up too) and for an external cluster.
var etcdStartTimeout = 60 * time.Second

// maxEtcdRequest is the largest etcd request: a 16 MiB configuration
// and its diff's bookkeeping (an external etcd needs
// --max-request-bytes this large too).
const maxEtcdRequest = 40 << 20

// Station is a running management station.
type Station struct {
	opt  Options
	log  *slog.Logger
	name string // this station's name (etcd member name, or Listen)

	etcd     *embed.Etcd      // nil with an external cluster
	cli      *clientv3.Client // every read and write
	endpoint string           // this station's etcd endpoint (for /healthz)
	// etcdCA is the CA the embedded member's listeners trust and its
	// certificates are signed by (nil: an external cluster).
	etcdCA *caPair
	// ca is the cluster's shared CA (nil: Insecure on an external
	// etcd); it signs the directors' etcd client certificates.
	ca *caPair
	// crlKick wakes crlLoop (nil with an external cluster).
	crlKick chan struct{}
	// haKick wakes haRolesLoop (nil with an external cluster).
	haKick chan struct{}

	tlsConf *tls.Config // nil: Insecure
	caPEM   []byte      // what members are given and pin

	met *metrics
	fb  *stationFB // the feedback monitor (feedback.go)

	watchCancel context.CancelFunc
	wakeMu      sync.Mutex
	wake        chan struct{} // closed (and replaced) when cfg, drain or binary keys change
	waitMu      sync.Mutex
	waits       map[string]int // long polls waiting, per member

	evMu   sync.Mutex
	events []api.Event // ring, last maxEvents
	subs   map[chan api.Event]struct{}

	lastVerEvent int64 // highest version announced as an event (evMu)

	cfgMu    sync.Mutex
	cfgCache cfgInfo // accounts and meta of one version

	logins *loginGuard // bounds password checks, locks out repeated failures

	healthMu  sync.Mutex // held through a /healthz check
	healthAt  time.Time  // when the last check ran
	healthErr error      // its answer

	urlMu sync.Mutex
	url   string // this station's API URL once Run listens

	lock *os.File // DATA/lock, held (flock) while the station runs

	closeOnce sync.Once
	etcdOnce  sync.Once
}

// New opens (or creates) the station's data and connects to etcd
// (starting the embedded member); Run serves.
func New(opt Options) (*Station, error) { return NewContext(context.Background(), opt) }

// NewContext is New that gives up when ctx ends (a signal while it waits
// for etcd or the other stations).
func NewContext(ctx context.Context, opt Options) (*Station, error) {
	if opt.Data == "" {
		return nil, errors.New("mgmt: no data directory")
	}
	if opt.Listen == "" {
		opt.Listen = "127.0.0.1:7600"
	}
	if opt.MemberTimeout <= 0 {
		opt.MemberTimeout = 5 * time.Second
	}
	if opt.EtcdName == "" {
		opt.EtcdName = "station"
	}
	if opt.EtcdPeer == "" {
		opt.EtcdPeer = "127.0.0.1:7602"
	}
	if opt.EtcdClient == "" {
		opt.EtcdClient = "127.0.0.1:7601"
	}
	s := &Station{opt: opt, log: opt.Log, subs: map[chan api.Event]struct{}{},
		logins: newLoginGuard(), waits: map[string]int{}, wake: make(chan struct{}), met: newMetrics(), fb: newStationFB()}
	s.met.reg.MustRegister(fbCollector{s.fb})
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("role", "mgmt")
	if err := os.MkdirAll(opt.Data, 0o700); err != nil {
		return nil, fmt.Errorf("mgmt: data: %w", err)
	}
	lock, err := lockData(opt.Data)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	if err := s.connect(ctx); err != nil {
		s.Close()
		return nil, err
	}
	for try := 1; ; try++ {
		err := s.setup()
		if err == nil {
			break
		}
		// Stations forming one cluster may restart their members at the
		// same moment (restartEtcd): quorum and leader come back within
		// seconds. setup's steps may be repeated.
		if try == setupTries || !transientEtcd(err) || ctx.Err() != nil || s.cli == nil {
			s.Close()
			return nil, err
		}
		s.log.Warn("station setup: etcd not ready; trying again", "try", try, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	wctx, wcancel := context.WithCancel(context.Background())
	s.watchCancel = wcancel
	if s.etcdCA != nil {
		s.crlKick = make(chan struct{}, 1)
		go s.crlLoop(wctx)
		s.haKick = make(chan struct{}, 1)
		go s.haRolesLoop(wctx)
	}
	go s.watch(wctx)
	return s, nil
}

// setupTries bounds setup's attempts while etcd settles.
const setupTries = 10

// transientEtcd says whether err is etcd losing its leader or quorum for
// a moment (a request timed out, unavailable), worth trying again.
func transientEtcd(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) || errors.Is(err, rpctypes.ErrLeaderChanged) {
		return true
	}
	switch grpcstatus.Code(errors.Unwrap(err)) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return strings.Contains(err.Error(), "etcdserver: request timed out") || strings.Contains(err.Error(), "etcdserver: leader changed")
}

// lockData takes DATA/lock: a second station on the same directory
// would otherwise wait forever on etcd's database lock.
func lockData(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("mgmt: data: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("mgmt: data directory %s is in use by another station (%v)", dir, err)
	}
	return f, nil
}

// connect starts the embedded member (or reaches the external cluster)
// and opens the client.
func (s *Station) connect(ctx context.Context) error {
	eps := s.opt.Etcd
	var ctls *tls.Config
	var user, password string
	if len(eps) == 0 {
		s.name = s.opt.EtcdName
		files, c, err := s.etcdTLS()
		if err != nil {
			return err
		}
		ctls = c
		e, err := startEtcd(ctx, s.opt, files)
		if err != nil {
			return err
		}
		s.etcd = e
		eps = []string{etcdURL(s.opt)}
	} else {
		s.name = s.opt.Listen
		c, err := externalEtcdTLS(s.opt)
		if err != nil {
			return err
		}
		ctls, user, password = c, s.opt.EtcdUser, s.opt.EtcdPassword
	}
	s.endpoint = eps[0]
	dial := 5 * time.Second
	if user != "" {
		// New logs in as well: a bcrypt check on a server that may be busy.
		dial = 15 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: dial, Logger: zap.NewNop(),
		MaxCallSendMsgSize: maxEtcdRequest + 1<<20, TLS: ctls, Username: user, Password: password})
	if err != nil {
		return fmt.Errorf("mgmt: etcd client %v: %w", eps, err)
	}
	s.cli = cli
	wctx, cancel := context.WithTimeout(ctx, etcdStartTimeout)
	defer cancel()
	// A linearizable read proves a quorum answers.
	for {
		_, err := cli.Get(wctx, keyCurrent)
		if err == nil {
			return s.advertiseTLSPeer(wctx)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("mgmt: stopped while waiting for etcd %v: %w", eps, ctx.Err())
		}
		if wctx.Err() != nil {
			return fmt.Errorf("mgmt: etcd %v did not answer within %v: %w", eps, etcdStartTimeout, err)
		}
		select {
		case <-wctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// etcdURL is the embedded member's client URL.
func etcdURL(opt Options) string { return "https://" + opt.EtcdClient }

// etcdPeerCN is the common name of the members' peer certificates; the
// peer listeners take no other, so a director's or a member's client
// certificate of the same CA cannot speak raft (and read every key). No
// member name can take it: names have no spaces.
const etcdPeerCN = "corral etcd peer"

// externalEtcdTLS is the client TLS for an external cluster from
// EtcdCA, EtcdCert and EtcdKey (nil when none is given: plain http).
func externalEtcdTLS(opt Options) (*tls.Config, error) {
	if opt.EtcdCA == "" && opt.EtcdCert == "" && opt.EtcdKey == "" {
		for _, e := range opt.Etcd {
			if strings.HasPrefix(e, "https://") {
				return nil, fmt.Errorf("mgmt: etcd %s is https: give its CA (--etcd-ca)", e)
			}
		}
		return nil, nil
	}
	if (opt.EtcdCert == "") != (opt.EtcdKey == "") {
		return nil, errors.New("mgmt: external etcd: a client certificate needs its key and a key its certificate (--etcd-cert and --etcd-key)")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if opt.EtcdCA != "" {
		b, err := os.ReadFile(opt.EtcdCA)
		if err != nil {
			return nil, fmt.Errorf("mgmt: external etcd CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("mgmt: external etcd CA %s: no PEM certificate in it", opt.EtcdCA)
		}
		tc.RootCAs = pool
	}
	if opt.EtcdKey != "" {
		if err := safefile.CheckSecret(opt.EtcdKey); err != nil {
			return nil, fmt.Errorf("mgmt: external etcd key: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(opt.EtcdCert, opt.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("mgmt: external etcd client certificate %s, key %s: %w", opt.EtcdCert, opt.EtcdKey, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// etcdTLSFiles are the files the embedded member's listeners use: the
// client listener's certificate (server and client use: etcd's gateway
// dials the member with it), the peer certificate (both uses, common
// name etcdPeerCN), and the CA whose certificates both accept.
type etcdTLSFiles struct{ cert, key, peerCert, peerKey, ca, crl string }

// etcdTLS prepares the listeners' TLS from this station's CA in DATA/tls
// (made there when absent; setup replaces it with the cluster's shared
// one if that differs, restarting the member). It returns the files and
// the station's own client configuration: a certificate with common name
// root, which etcd takes as its user (auth is always on).
func (s *Station) etcdTLS() (*etcdTLSFiles, *tls.Config, error) {
	dir := filepath.Join(s.opt.Data, "tls")
	ca, err := loadLocalCA(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("mgmt: etcd TLS: %w", err)
	}
	if ca == nil {
		if ca, err = newCA(); err != nil {
			return nil, nil, err
		}
		for name, b := range map[string][]byte{"ca.pem": ca.Cert, "ca.key": ca.Key} {
			if err := writeFile0600(filepath.Join(dir, name), b); err != nil {
				return nil, nil, fmt.Errorf("mgmt: etcd TLS: %w", err)
			}
		}
	}
	host, _, err := net.SplitHostPort(s.opt.EtcdClient)
	if err != nil {
		return nil, nil, fmt.Errorf("mgmt: etcd client address %q: %w", s.opt.EtcdClient, err)
	}
	certPEM, keyPEM, err := ca.issue("corral station etcd "+s.opt.EtcdName, host,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, nil, fmt.Errorf("mgmt: etcd TLS: %w", err)
	}
	peerHost, _, err := net.SplitHostPort(s.opt.EtcdPeer)
	if err != nil {
		return nil, nil, fmt.Errorf("mgmt: etcd peer address %q: %w", s.opt.EtcdPeer, err)
	}
	peerPEM, peerKeyPEM, err := ca.issue(etcdPeerCN, peerHost,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, nil, fmt.Errorf("mgmt: etcd peer TLS: %w", err)
	}
	f := &etcdTLSFiles{cert: filepath.Join(dir, "etcd.pem"), key: filepath.Join(dir, "etcd.key"), ca: filepath.Join(dir, "etcd-ca.pem"),
		peerCert: filepath.Join(dir, "etcd-peer.pem"), peerKey: filepath.Join(dir, "etcd-peer.key"), crl: filepath.Join(dir, crlFile)}
	if err := ensureCRL(f.crl, ca); err != nil {
		return nil, nil, fmt.Errorf("mgmt: etcd TLS: %w", err)
	}
	for name, b := range map[string][]byte{f.cert: certPEM, f.key: keyPEM, f.ca: ca.Cert, f.peerCert: peerPEM, f.peerKey: peerKeyPEM} {
		if err := writeFile0600(name, b); err != nil {
			return nil, nil, fmt.Errorf("mgmt: etcd TLS: %w", err)
		}
	}
	ctls, err := etcdClientTLS(ca, etcdRootUser)
	if err != nil {
		return nil, nil, fmt.Errorf("mgmt: etcd TLS: %w", err)
	}
	s.etcdCA = ca
	return f, ctls, nil
}

// etcdRootUser is the etcd user (the common name of its client
// certificate) the station acts as.
const etcdRootUser = "root"

// etcdClientTLS is a client TLS configuration trusting ca, with a fresh
// certificate for user signed by it.
func etcdClientTLS(ca *caPair, user string) (*tls.Config, error) {
	certPEM, keyPEM, err := ca.clientCert(user)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.Cert) {
		return nil, errors.New("CA certificate unreadable")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// restartEtcd brings the embedded member up again on the cluster's shared
// CA: a station that joined the others made its own CA for its client
// listener before it could read the shared one.
func (s *Station) restartEtcd(ctx context.Context, ca *caPair) error {
	dir := filepath.Join(s.opt.Data, "tls")
	for name, b := range map[string][]byte{"ca.pem": ca.Cert, "ca.key": ca.Key} {
		if err := writeFile0600(filepath.Join(dir, name), b); err != nil {
			return fmt.Errorf("mgmt: etcd TLS: %w", err)
		}
	}
	s.log.Info("restarting the embedded etcd on the cluster's shared CA", "etcd", s.endpoint)
	s.cli.Close()
	s.etcd.Close()
	s.cli, s.etcd = nil, nil
	return s.connect(ctx)
}

// startEtcd starts the embedded member in DATA/etcd; its log goes to
// DATA/etcd.log at level warn. Both listeners take TLS 1.3 only and
// require client certificates signed by the CA in files.ca; the peer one
// only those of common name etcdPeerCN.
func startEtcd(ctx context.Context, opt Options, files *etcdTLSFiles) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = opt.EtcdName
	cfg.Dir = filepath.Join(opt.Data, "etcd")
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(opt.Data, "etcd.log")}
	pu, err := url.Parse("https://" + opt.EtcdPeer)
	if err != nil {
		return nil, fmt.Errorf("mgmt: etcd peer address %q: %w", opt.EtcdPeer, err)
	}
	cu, err := url.Parse(etcdURL(opt))
	if err != nil {
		return nil, fmt.Errorf("mgmt: etcd client address %q: %w", opt.EtcdClient, err)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: files.cert, KeyFile: files.key,
		TrustedCAFile: files.ca, ClientCertAuth: true, CRLFile: files.crl}
	cfg.PeerTLSInfo = transport.TLSInfo{CertFile: files.peerCert, KeyFile: files.peerKey,
		TrustedCAFile: files.ca, ClientCertAuth: true, AllowedCNs: []string{etcdPeerCN}}
	cfg.TlsMinVersion = "TLS1.3"
	// etcd's own /metrics and health on the client port stay off the API.
	cfg.InitialCluster = opt.EtcdName + "=" + pu.String()
	if opt.EtcdInitialCluster != "" {
		if err := checkInitialCluster(opt.EtcdInitialCluster); err != nil {
			return nil, err
		}
		cfg.InitialCluster = opt.EtcdInitialCluster
	}
	cfg.InitialClusterToken = "corral-mgmt"
	// A configuration may be 16 MiB; members' reports rewrite keys every
	// second, so old revisions are compacted away.
	cfg.MaxRequestBytes = maxEtcdRequest
	// NewConfig leaves this at 0 (only etcd's flags default it), which
	// logs every request at warn: DATA/etcd.log would grow forever.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "10m"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("mgmt: embedded etcd (%s, peer %s, client %s): %w", cfg.Dir, opt.EtcdPeer, opt.EtcdClient, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("mgmt: embedded etcd: %w", err)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("mgmt: stopped while the embedded etcd in %s waited for %q: %w", cfg.Dir, cfg.InitialCluster, ctx.Err())
	case <-time.After(etcdStartTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("mgmt: embedded etcd in %s not ready within %v (other members of %q not up, or not started with the same CA in DATA/tls: see corral mgmt init-ca; their TLS errors are in %s)",
			cfg.Dir, etcdStartTimeout, cfg.InitialCluster, filepath.Join(opt.Data, "etcd.log"))
	}
}

// checkInitialCluster refuses an initial cluster whose peer URLs are not
// https: peers always speak TLS.
func checkInitialCluster(ic string) error {
	for _, m := range strings.Split(ic, ",") {
		name, u, ok := strings.Cut(m, "=")
		if !ok || name == "" {
			return fmt.Errorf("mgmt: etcd initial cluster %q: %q is not NAME=https://HOST:PORT", ic, m)
		}
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "https" || p.Host == "" {
			return fmt.Errorf("mgmt: etcd initial cluster: member %s's peer URL %q: want https://HOST:PORT (peers speak TLS only)", name, u)
		}
	}
	return nil
}

// advertiseTLSPeer moves this member's peer URL to https when its data
// came from a version whose peers spoke plain http (etcd keeps the URL
// it was first started with).
func (s *Station) advertiseTLSPeer(ctx context.Context) error {
	if s.etcd == nil {
		return nil
	}
	want := "https://" + s.opt.EtcdPeer
	id := uint64(s.etcd.Server.MemberID())
	resp, err := s.cli.MemberList(ctx)
	if err != nil {
		// Checked again on the next start; the member serves meanwhile.
		s.log.Warn("etcd member list: the peer URL is not checked", "err", err)
		return nil
	}
	for _, m := range resp.Members {
		if m.ID == id && !(len(m.PeerURLs) == 1 && m.PeerURLs[0] == want) {
			s.log.Info("etcd member's peer URL moves to TLS", "from", m.PeerURLs, "to", want)
			if _, err := s.cli.MemberUpdate(ctx, id, []string{want}); err != nil {
				return fmt.Errorf("mgmt: etcd member %s's peer URL to %s: %w", s.opt.EtcdName, want, err)
			}
		}
	}
	return nil
}

// setup runs once etcd answers: a pending restore, the shared CA, TLS,
// the bootstrap admin token (NewContext starts the watch).
func (s *Station) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.finishRestore(ctx); err != nil {
		return err
	}
	if !s.opt.Insecure || s.etcdCA != nil {
		// With an embedded member, always: its TLS and the directors'
		// certificates hang on the shared CA.
		ca, err := s.sharedCA(ctx)
		if err != nil {
			return err
		}
		if s.etcdCA != nil && !bytes.Equal(s.etcdCA.Cert, ca.Cert) {
			if err := s.restartEtcd(ctx, ca); err != nil {
				return err
			}
		}
		s.ca = ca
	}
	if s.etcdCA != nil {
		if err := s.setupEtcdAuth(ctx); err != nil {
			return err
		}
	}
	if !s.opt.Insecure {
		tc, caPEM, err := s.setupTLS(s.ca)
		if err != nil {
			return fmt.Errorf("mgmt: TLS: %w", err)
		}
		s.tlsConf, s.caPEM = tc, caPEM
	}
	return s.bootstrapAdmin(ctx)
}

// sharedCA is the CA every station of the cluster uses: the one in etcd,
// else this station's DATA/tls one (or a new one) put there first.
func (s *Station) sharedCA(ctx context.Context) (*caPair, error) {
	local, err := loadLocalCA(filepath.Join(s.opt.Data, "tls"))
	if err != nil {
		return nil, fmt.Errorf("mgmt: TLS: %w", err)
	}
	if local == nil {
		if local, err = newCA(); err != nil {
			return nil, err
		}
	}
	b, _ := json.Marshal(local)
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(keyCA), "=", 0)).
		Then(clientv3.OpPut(keyCA, string(b))).Else(clientv3.OpGet(keyCA)).Commit()
	if err != nil {
		return nil, fmt.Errorf("mgmt: CA in etcd: %w", err)
	}
	if resp.Succeeded {
		return local, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	var ca caPair
	if len(kvs) == 0 || json.Unmarshal(kvs[0].Value, &ca) != nil {
		return nil, fmt.Errorf("mgmt: CA in etcd (%s) unreadable", keyCA)
	}
	if _, _, err := ca.parse(); err != nil {
		return nil, fmt.Errorf("mgmt: CA in etcd: %w", err)
	}
	return &ca, nil
}

// Run serves the API until ctx ends; ready is called with the API's
// address once it listens.
func (s *Station) Run(ctx context.Context, ready func(addr string)) error {
	ln, err := net.Listen("tcp", s.opt.Listen)
	if err != nil {
		return fmt.Errorf("mgmt: listen %s: %w", s.opt.Listen, err)
	}
	scheme := "http"
	if s.tlsConf != nil {
		ln = tls.NewListener(ln, s.tlsConf)
		scheme = "https"
	}
	addr := ln.Addr().String()
	s.urlMu.Lock()
	s.url = scheme + "://" + addr
	s.urlMu.Unlock()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = s.cli.Put(rctx, keyStations+s.name, s.url)
	rcancel()
	if err != nil {
		ln.Close()
		return fmt.Errorf("mgmt: register station: %w", err)
	}
	// No WriteTimeout: long polls and backups take their time.
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go s.monitorMembers(mctx)
	go s.pruneTokensEvery(mctx)
	fbDone := make(chan struct{})
	go func() { defer close(fbDone); s.feedbackLoop(mctx) }()
	defer func() { mcancel(); <-fbDone }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("station serving", "url", s.url, "etcd", s.endpoint)
	if ready != nil {
		ready(addr)
	}
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// Long polls would hold Shutdown; they end with the server.
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		// A station stopped on purpose is no longer listed (join replies,
		// the dashboard, Prometheus SD); a crashed one stays until it
		// starts again.
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer dcancel()
		if _, err := s.cli.Delete(dctx, keyStations+s.name); err != nil {
			s.log.Warn("unregistering the station", "err", err)
		}
		return nil
	case err := <-errc:
		return fmt.Errorf("mgmt: serve: %w", err)
	}
}

// URL is this station's API URL once Run listens ("" before).
func (s *Station) URL() string {
	s.urlMu.Lock()
	defer s.urlMu.Unlock()
	return s.url
}

// CA is the CA PEM members are given (nil when Insecure).
func (s *Station) CA() []byte { return s.caPEM }

// Close stops etcd and releases the data.
func (s *Station) Close() error {
	s.closeOnce.Do(func() {
		if s.watchCancel != nil {
			s.watchCancel()
		}
		if s.cli != nil {
			s.cli.Close()
		}
		s.closeEtcd()
		if s.lock != nil {
			s.lock.Close() // releases the flock
		}
		s.evMu.Lock()
		for c := range s.subs {
			close(c)
			delete(s.subs, c)
		}
		s.evMu.Unlock()
	})
	return nil
}

// closeEtcd stops the embedded member (once).
func (s *Station) closeEtcd() {
	s.etcdOnce.Do(func() {
		if s.etcd != nil {
			s.etcd.Close()
		}
	})
}

// stations is every station's API URL (registered by Run).
func (s *Station) stations(ctx context.Context) []string {
	resp, err := s.cli.Get(ctx, keyStations, clientv3.WithPrefix())
	if err != nil {
		if u := s.URL(); u != "" {
			return []string{u}
		}
		return nil
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Value))
	}
	return out
}

func trimPrefix(k []byte, p string) string { return strings.TrimPrefix(string(k), p) }
