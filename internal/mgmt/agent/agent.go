// Package agent is a member's side of the management station: it joins
// with a token (or the credential saved by an earlier join), long-polls the
// station for what it should run, hands each new configuration to the
// role's Apply (an Apply that fails leaves the old configuration running
// and reports the error; the last one applied is kept in the state
// directory and applied again by a member restarted while the station is
// away), reports every second (version applied, health,
// build, a role-specific report) and carries out rolling-upgrade orders.
// Used by `corral director|node|meta|iod --join STATION --token T`.
package agent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
)

// Options configure an agent.
type Options struct {
	// Stations are the station API URLs (https://127.0.0.1:7600); tried in turn.
	Stations []string
	// Token is the join token (used once, when no saved credential works).
	Token string
	// State is the directory where the join's credential, the station's CA
	// and the file-system credential are kept (0600), so a restart does
	// not need the token again, and the configuration last applied
	// (AppliedFile), which a restart applies while the station is away.
	State string
	// CAFile, if set, is the station's CA (else the join reply's, pinned
	// on first join by the token's CA hash; see docs/mgmt.md).
	CAFile string
	// Role, Name, Addr describe the member (api.Role*, its name, where it serves).
	Role, Name, Addr string
	// Metrics is the URL of the member's /metrics (for Prometheus discovery).
	Metrics string
	// Apply applies a configuration version; drained are node names to
	// give weight 0. An error leaves the old one running; it is reported.
	Apply func(ctx context.Context, cfg *clustercfg.Config, version int64, drained []string) error
	// Health says whether the member works (nil: healthy).
	Health func() error
	// Report returns the role-specific report (JSON-encodable) or nil.
	Report func() any
	// Feedback, if set (a director), receives each feedback publication
	// of the station (the body of GET /v1/feedback, at most 32 MB) as it
	// comes; an error is logged. See feedback.go.
	Feedback func(b []byte) error
	// Log receives the agent's events; nil: slog.Default().
	Log *slog.Logger
}

// Bounds of the agent's calls (vars: tests shorten them).
var (
	// pollWait is how long the station may hold a long-poll.
	pollWait = 30 * time.Second
	// reportEvery is the report interval.
	reportEvery = time.Second
	// maxBackoff bounds the wait between tries while the station is away.
	maxBackoff = 2 * time.Second
	// callTimeout bounds a join, a report or a first check of the credential.
	callTimeout = 10 * time.Second
	// retryEvery is how often a version that could not be applied is
	// tried again while it is the one wanted (the cause may pass: meta
	// electing a leader, a VIP not yet free).
	retryEvery = 10 * time.Second
	// dialTimeout bounds connecting to one station and the TLS handshake:
	// a station that takes the connection and never answers (its host
	// hung) must leave the call time to try the next.
	dialTimeout = 5 * time.Second
)

// parse reads a version's YAML (a var so that tests can stand in for a
// parser still being built elsewhere).
var parse = clustercfg.Parse

// StateFile is the saved credential's file name in Options.State.
const StateFile = "member.json"

// AppliedFile is the configuration last applied, in Options.State: a
// member restarted while the station is away runs it rather than nothing.
const AppliedFile = "applied.json"

// kept is State/applied.json.
type kept struct {
	Role    string   `json:"role"`
	Member  string   `json:"member"`
	Version int64    `json:"version"`
	YAML    string   `json:"yaml"`
	Drained []string `json:"drained"`
}

// saved is State/member.json: what a restart needs instead of the token.
type saved struct {
	Stations   []string `json:"stations"`
	Member     string   `json:"member"`
	Role       string   `json:"role"`
	Credential string   `json:"credential"`
	CA         string   `json:"ca"`     // PEM
	Secret     []byte   `json:"secret"` // file-system credential
	Meta       []string `json:"meta"`
	// HAEtcd are the station's etcd client URLs of a director's HA part
	// (its files are beside: HACAFile, HACertFile, HAKeyFile, HASyncKeyFile).
	HAEtcd []string `json:"ha_etcd,omitempty"`
}

// Agent is a joined member's link to the station.
type Agent struct {
	opt     Options
	log     *slog.Logger
	cl      *api.Client
	reply   *api.JoinReply
	started time.Time
	// bigReport: the role report was once too big to send (logged once).
	bigReport atomic.Bool

	mu       sync.Mutex
	applied  int64  // version running
	applyErr string // why the last version tried could not be applied
	tried    string // version and drained list last handed to Apply
	binary   string // last rolling-upgrade order carried out (its JSON)
	kick     chan struct{}
	away     bool // the station did not answer the saved credential's check
}

// Join joins (or reuses the saved credential) and returns the agent and
// the join reply (file-system credential, meta members, CA).
func Join(ctx context.Context, opt Options) (*Agent, *api.JoinReply, error) {
	if len(opt.Stations) == 0 {
		return nil, nil, errors.New("join: no station: give --join URL")
	}
	opt.Stations = slices.Clone(opt.Stations)
	for i, s := range opt.Stations {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, nil, fmt.Errorf("join: station %q: want a URL such as https://127.0.0.1:7600", s)
		}
		if ip, err := netip.ParseAddr(u.Hostname()); u.Scheme == "http" && (err != nil || !ip.IsLoopback()) && u.Hostname() != "localhost" {
			// Tokens and credentials in the clear: a test station on
			// loopback only.
			return nil, nil, fmt.Errorf("join: station %q: plain http is for a station on loopback only; use https", s)
		}
		opt.Stations[i] = strings.TrimSuffix(s, "/")
	}
	if opt.Role == "" || opt.Name == "" {
		return nil, nil, errors.New("join: the member's role and name are needed")
	}
	if opt.Apply == nil {
		opt.Apply = func(context.Context, *clustercfg.Config, int64, []string) error { return nil }
	}
	a := &Agent{opt: opt, log: opt.Log, started: time.Now(), kick: make(chan struct{}, 1)}
	if a.log == nil {
		a.log = slog.Default()
	}
	var caFile []byte
	if opt.CAFile != "" {
		b, err := os.ReadFile(opt.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("join: --station-ca: %w", err)
		}
		caFile = b
	}
	sv, err := a.load()
	if err != nil {
		return nil, nil, err
	}
	if sv != nil {
		ca := []byte(sv.CA)
		if caFile != nil {
			ca = caFile
		}
		ok, err := a.useSaved(ctx, sv, ca)
		if ok && a.away && opt.Token != "" {
			// The station did not answer the saved credential: away, or
			// one with another CA now (made anew), which a token
			// (pinning its CA by hash) joins. Away, the join fails too
			// and the saved credential serves.
			cl, reply := a.cl, a.reply
			jerr := a.joinToken(ctx, caFile)
			if jerr == nil {
				a.away = false
				return a, a.reply, nil
			}
			a.log.Warn("the token did not join either; starting on the saved credential", "err", jerr)
			a.cl, a.reply = cl, reply
		}
		if ok {
			return a, a.reply, nil
		}
		if opt.Token == "" {
			return nil, nil, fmt.Errorf("join: the credential saved in %s was refused (%v) and no --token was given (make one: corral mgmt token create --role %s)", a.statePath(), err, opt.Role)
		}
		a.log.Warn("saved station credential refused; joining with the token", "err", err)
	}
	if opt.Token == "" {
		return nil, nil, fmt.Errorf("join: no --token or --token-file, and no saved credential in %s", a.statePath())
	}
	if err := a.joinToken(ctx, caFile); err != nil {
		return nil, nil, err
	}
	return a, a.reply, nil
}

func (a *Agent) statePath() string {
	if a.opt.State == "" {
		return "(no --state)"
	}
	return a.opt.State + "/" + StateFile
}

// load reads the saved credential: nil when there is none (or it is of
// another role or name, which a new join replaces).
func (a *Agent) load() (*saved, error) {
	if a.opt.State == "" {
		return nil, nil
	}
	b, err := safefile.ReadSecret(a.statePath()) // refused when others may read it
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	var sv saved
	if err := json.Unmarshal(b, &sv); err != nil || sv.Credential == "" {
		if a.opt.Token != "" {
			a.log.Warn("saved credential damaged; joining with the token (which replaces it)", "file", a.statePath(), "err", err)
			return nil, nil
		}
		return nil, fmt.Errorf("join: %s is damaged (%v): join again with --token (it replaces the file)", a.statePath(), err)
	}
	if sv.Role != a.opt.Role || sv.Member != a.opt.Name {
		a.log.Warn("saved credential is of another member; joining again", "file", a.statePath(), "saved", sv.Role+" "+sv.Member)
		return nil, nil
	}
	return &sv, nil
}

// useSaved checks the saved credential with a quick desired call. A
// station that does not answer is no reason to give up the credential: the
// member starts and Run keeps trying. Only a 401 sends it back to the token.
func (a *Agent) useSaved(ctx context.Context, sv *saved, ca []byte) (bool, error) {
	cl, err := newClient(mergeStations(a.opt.Stations, sv.Stations), sv.Credential, ca)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var d api.Desired
	err = cl.Do(cctx, http.MethodGet, api.RouteDesired+"?after=-1&wait=0s", nil, &d)
	var se *api.StatusError
	if errors.As(err, &se) && se.Status == http.StatusUnauthorized {
		cl.HTTP.CloseIdleConnections()
		return false, err
	}
	if err != nil {
		a.log.Warn("station not reachable; starting on the saved credential", "err", err)
		a.away = true
	}
	a.cl = cl
	a.reply = &api.JoinReply{Member: sv.Member, Credential: sv.Credential, CA: string(ca), Secret: sv.Secret, Meta: sv.Meta, Stations: sv.Stations}
	return true, nil
}

// joinToken joins with the token, checking the station's CA by the
// token's hash (or against CAFile), and saves the reply.
func (a *Agent) joinToken(ctx context.Context, caFile []byte) error {
	tok, err := ParseToken(a.opt.Token)
	if err != nil {
		return err
	}
	var hc *http.Client
	pin := &pinned{hash: tok.CAHash}
	switch {
	case caFile != nil:
		cl, err := newClient(nil, "", caFile)
		if err != nil {
			return fmt.Errorf("join: --station-ca %s: %w", a.opt.CAFile, err)
		}
		hc = cl.HTTP
	default:
		hc = &http.Client{Transport: pin.transport()}
	}
	defer hc.CloseIdleConnections()
	cl := &api.Client{Stations: a.opt.Stations, Token: a.opt.Token, HTTP: hc}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var r api.JoinReply
	err = cl.Do(cctx, http.MethodPost, api.RouteJoin, api.JoinRequest{Role: a.opt.Role, Name: a.opt.Name, Addr: a.opt.Addr}, &r)
	var se *api.StatusError
	switch {
	case errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden):
		return fmt.Errorf("join: %s (make a new one: corral mgmt token create --role %s)", se.Body.Error, a.opt.Role)
	case err != nil && pin.mismatch() != "":
		// Only when no station took the join: one that showed another
		// CA was skipped for the next.
		return fmt.Errorf("join: station's CA does not match the token's hash (token: %s, station: %s): a wrong station, or one that is not who it says", tok.CAHash, pin.mismatch())
	case err != nil:
		return fmt.Errorf("join: %w", err)
	case r.Credential == "":
		return errors.New("join: the station's reply carries no credential")
	}
	ca := caFile
	if ca == nil {
		ca = []byte(r.CA)
		if !pin.insecure() {
			// The CA handed over must be the one the token names, or
			// later calls would trust another.
			if h := api.CAHashPEM(ca); h != tok.CAHash {
				return fmt.Errorf("join: station's CA does not match the token's hash (token: %s, reply: %s)", tok.CAHash, cmp.Or(h, "no certificate"))
			}
		}
	}
	stations := mergeStations(a.opt.Stations, r.Stations)
	if a.cl, err = newClient(stations, r.Credential, ca); err != nil {
		return fmt.Errorf("join: station CA in the reply: %w", err)
	}
	r.CA = string(ca)
	a.reply = &r
	sv := &saved{Stations: stations, Member: a.opt.Name, Role: a.opt.Role, Credential: r.Credential, CA: string(ca), Secret: r.Secret, Meta: r.Meta}
	if err := a.saveHA(r.HA); err != nil {
		return err
	}
	if err := a.saveTLS(r.TLS); err != nil {
		return err
	}
	if r.HA != nil {
		sv.HAEtcd = r.HA.Etcd
	}
	return a.save(sv)
}

func (a *Agent) save(sv *saved) error {
	if a.opt.State == "" {
		return nil
	}
	if err := os.MkdirAll(a.opt.State, 0o700); err != nil {
		return fmt.Errorf("join: --state: %w", err)
	}
	b, _ := json.MarshalIndent(sv, "", "  ")
	if err := writeSecret(a.statePath(), b); err != nil {
		return fmt.Errorf("join: saving the credential: %w", err)
	}
	return nil
}

// writeSecret writes b to path, mode 0600, through safefile: a crash or a
// power cut leaves the old file or the new one.
func writeSecret(path string, b []byte) error {
	return safefile.WriteSecret(path, b)
}

// newClient is api.NewClient with connecting and the TLS handshake
// bounded by dialTimeout.
func newClient(stations []string, token string, ca []byte) (*api.Client, error) {
	cl, err := api.NewClient(stations, token, ca)
	if err != nil {
		return nil, err
	}
	if tr, ok := cl.HTTP.Transport.(*http.Transport); ok {
		tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = dialTimeout
	}
	return cl, nil
}

// mergeStations is first, then those of more not in it, as URLs.
func mergeStations(first, more []string) []string {
	out := slices.Clone(first)
	for _, s := range more {
		if !strings.Contains(s, "://") {
			s = "https://" + s
		}
		s = strings.TrimSuffix(s, "/")
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// State is the directory the credential is kept in.
func (a *Agent) State() string { return a.opt.State }

// Reply is the join reply (or what was saved of it).
func (a *Agent) Reply() *api.JoinReply { return a.reply }

// Applied is the configuration version running and why the last one
// tried was refused ("" when it was applied).
func (a *Agent) Applied() (int64, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied, a.applyErr
}

// Run long-polls, applies and reports until ctx ends. A station that is
// away is tried again (every maxBackoff at most); the member keeps
// running on its last configuration meanwhile.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.reportLoop(ctx) }()
	if a.opt.Feedback != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.feedbackLoop(ctx) }()
	}
	defer a.cl.HTTP.CloseIdleConnections() // after the loops: nothing uses them then
	defer wg.Wait()
	rev := int64(-1)
	backoff := 100 * time.Millisecond
	down := false
	var last *api.Desired // the desired state last handled
	var tried time.Time
	// retry applies last again if it was refused retryEvery ago (the
	// cause may have passed), the station answering or not.
	retry := func() {
		if _, e := a.Applied(); e != "" && last != nil && time.Since(tried) >= retryEvery {
			a.mu.Lock()
			a.tried = "" // the same version again
			a.mu.Unlock()
			tried = time.Now()
			a.handle(ctx, last)
		}
	}
	if a.away {
		last, tried = a.applyKept(ctx), time.Now()
	}
	for ctx.Err() == nil {
		wait := pollWait
		if _, e := a.Applied(); e != "" {
			wait = min(wait, retryEvery)
		}
		d, err := a.poll(ctx, rev, wait)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if !down {
				var se *api.StatusError
				if errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden) {
					a.log.Error("the station refuses this member's credential (revoked?); running on the last configuration: restart with --token to join again", "err", err)
				} else {
					a.log.Warn("station not reachable; running on the last configuration", "err", err)
				}
				down = true
				if v, _ := a.Applied(); v == 0 && last == nil {
					last, tried = a.applyKept(ctx), time.Now()
				}
			}
			retry()
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if down {
			a.log.Info("station back")
			down = false
		}
		backoff = 100 * time.Millisecond
		if d == nil || d.Rev == rev {
			retry()
			continue
		}
		rev, last, tried = d.Rev, d, time.Now()
		a.handle(ctx, d)
	}
	return nil
}

// poll is one long-poll; nil without error: nothing new.
func (a *Agent) poll(ctx context.Context, rev int64, wait time.Duration) (*api.Desired, error) {
	cctx, cancel := context.WithTimeout(ctx, wait+callTimeout)
	defer cancel()
	buf := &limitBuffer{max: maxDesired}
	q := "?after=" + strconv.FormatInt(rev, 10) + "&wait=" + wait.String()
	if err := a.cl.Do(cctx, http.MethodGet, api.RouteDesired+q, nil, buf); err != nil {
		return nil, err
	}
	if buf.Len() == 0 {
		return nil, nil
	}
	var d api.Desired
	if err := json.Unmarshal(buf.Bytes(), &d); err != nil {
		return nil, fmt.Errorf("desired: bad answer: %w", err)
	}
	return &d, nil
}

// maxDesired bounds a desired state's size (a configuration of 1,000
// services and 10,000 servers is a few MB).
const maxDesired = 64 << 20

// limitBuffer is a bytes.Buffer that refuses to grow past max.
type limitBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, fmt.Errorf("desired state larger than %d bytes", b.max)
	}
	return b.Buffer.Write(p)
}

// handle applies a desired state if its configuration or drained list
// is new, and passes on a rolling-upgrade order.
func (a *Agent) handle(ctx context.Context, d *api.Desired) {
	if d.Version > 0 {
		drained := slices.Clone(d.Drained)
		slices.Sort(drained)
		key := strconv.FormatInt(d.Version, 10) + " " + strings.Join(drained, ",")
		a.mu.Lock()
		fresh := key != a.tried
		a.tried = key
		a.mu.Unlock()
		if fresh {
			err := a.apply(ctx, d, drained)
			a.mu.Lock()
			if err != nil {
				a.applyErr = err.Error()
				a.log.Error("configuration refused; the running one stays", "version", d.Version, "running", a.applied, "err", err)
			} else {
				a.applied, a.applyErr = d.Version, ""
				a.log.Info("configuration applied", "version", d.Version, "drained", len(drained))
			}
			a.mu.Unlock()
			if err == nil {
				a.keep(d, drained)
			}
			select {
			case a.kick <- struct{}{}:
			default:
			}
		}
	}
	if d.Binary != nil {
		b, _ := json.Marshal(d.Binary)
		if string(b) != a.binary {
			a.binary = string(b)
			if err := a.handleBinary(ctx, d.Binary); err != nil {
				a.log.Error("rolling upgrade order failed", "sha256", d.Binary.SHA256, "err", err)
			}
		}
	}
}

// keep saves the configuration just applied as State/applied.json.
func (a *Agent) keep(d *api.Desired, drained []string) {
	if a.opt.State == "" {
		return
	}
	b, _ := json.Marshal(kept{Role: a.opt.Role, Member: a.opt.Name, Version: d.Version, YAML: d.YAML, Drained: drained})
	if err := writeSecret(filepath.Join(a.opt.State, AppliedFile), b); err != nil {
		a.log.Warn("could not keep the configuration applied (a restart while the station is away starts without it)", "err", err)
	}
}

// applyKept applies the configuration kept in State/applied.json, if
// any and nothing else has been: the station is away. It returns what it
// handled (nil: nothing).
func (a *Agent) applyKept(ctx context.Context) *api.Desired {
	if a.opt.State == "" {
		return nil
	}
	p := filepath.Join(a.opt.State, AppliedFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var k kept
	if err == nil {
		err = json.Unmarshal(b, &k)
	}
	if err != nil || k.Version <= 0 {
		a.log.Warn("the configuration kept from the station is unreadable; waiting for the station", "file", p, "err", err)
		return nil
	}
	if k.Role != a.opt.Role || k.Member != a.opt.Name {
		return nil
	}
	a.log.Info("station away: applying the configuration kept from it", "version", k.Version, "file", p)
	d := &api.Desired{Version: k.Version, YAML: k.YAML, Drained: k.Drained}
	a.handle(ctx, d)
	return d
}

func (a *Agent) apply(ctx context.Context, d *api.Desired, drained []string) (err error) {
	// A role's Apply that panics on a bad view must not take the member
	// down: the old configuration keeps running.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("applying version %d: panic: %v", d.Version, p)
		}
	}()
	cfg, err := parse(fmt.Sprintf("version %d", d.Version), []byte(d.YAML))
	if err != nil {
		return err
	}
	return a.opt.Apply(ctx, cfg, d.Version, drained)
}

// build is the sha256 of the running binary, computed once.
var build = sync.OnceValue(func() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
})

// MaxReport bounds the role-specific report sent with each status (the
// station's body limit for a report is 1 MiB, all of it included).
const MaxReport = 512 << 10

// Status is the report the agent sends now.
func (a *Agent) Status() api.MemberStatus {
	st := api.MemberStatus{Name: a.opt.Name, Role: a.opt.Role, Addr: a.opt.Addr, Healthy: true, Build: build(),
		Metrics: a.opt.Metrics, Started: a.started}
	st.Version, st.Error = a.Applied()
	if a.opt.Health != nil {
		if err := a.opt.Health(); err != nil {
			st.Healthy, st.Health = false, err.Error()
		}
	}
	if a.opt.Report != nil {
		if r := a.opt.Report(); r != nil {
			if b, err := json.Marshal(r); err == nil && len(b) <= MaxReport {
				st.Report = b
			} else if err == nil && !a.bigReport.Swap(true) {
				// A director of thousands of services: the station takes
				// at most 1 MiB a report (and etcd a bounded value). The
				// member still reports its version and health; the
				// dashboard shows the configured pools without numbers.
				a.log.Warn("role report left out of the status: too big", "bytes", len(b), "max", MaxReport)
			}
		}
	}
	return st
}

// reportLoop reports every reportEvery and right after every apply.
func (a *Agent) reportLoop(ctx context.Context) {
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	failing := false
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := a.cl.Do(cctx, http.MethodPost, api.RouteReport, a.Status(), nil)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			a.log.Warn("report not delivered; trying again", "err", err)
			failing = true
		case err == nil:
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.kick:
		}
	}
}
