package mgmt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/obs"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Body limits: JSON requests, and the ones carrying a configuration.
const (
	maxJSON = 1 << 20
	// maxConfig: a configuration of clustercfg.MaxDocument bytes inside
	// JSON, where escaping (quotes, newlines) can double it.
	maxConfig = 2*clustercfg.MaxDocument + 1<<20
	maxWait   = 60 * time.Second
	// maxWaitsPerMember bounds one member's concurrent long polls (its
	// agent has one; a leaked credential cannot pile up goroutines).
	maxWaitsPerMember = 4
)

// tooManyError is a 429; retry is its Retry-After (0: 1 s).
type tooManyError struct {
	msg   string
	retry time.Duration
}

func (e *tooManyError) Error() string { return e.msg }

// startWait counts one of member's long polls; false when it has
// maxWaitsPerMember already.
func (s *Station) startWait(member string) (release func(), ok bool) {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if s.waits[member] >= maxWaitsPerMember {
		return nil, false
	}
	s.waits[member]++
	return func() {
		s.waitMu.Lock()
		defer s.waitMu.Unlock()
		if s.waits[member]--; s.waits[member] <= 0 {
			delete(s.waits, member)
		}
	}, true
}

// longPoll reads a long poll's ?after=N (what N is, for the error) and
// ?wait=D (capped at maxWait), and counts the wait against p's
// maxWaitsPerMember. On false the reply is already written; otherwise
// release must be called when the poll ends.
func (s *Station) longPoll(w http.ResponseWriter, r *http.Request, p *Principal, what string) (after int64, wait time.Duration, release func(), ok bool) {
	q := r.URL.Query()
	if a := q.Get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			s.fail(w, &inputError{fmt.Sprintf("after %q: want %s", a, what)})
			return 0, 0, nil, false
		}
		after = n
	}
	if ws := q.Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			s.fail(w, &inputError{fmt.Sprintf("wait %q: want a duration (30s)", ws)})
			return 0, 0, nil, false
		}
		wait = min(d, maxWait)
	}
	release = func() {}
	if wait > 0 {
		if release, ok = s.startWait(p.Name); !ok {
			s.fail(w, &tooManyError{msg: fmt.Sprintf("%s already has %d long polls waiting", p.Name, maxWaitsPerMember)})
			return 0, 0, nil, false
		}
	}
	return after, wait, release, true
}

type metrics struct {
	reg          *prometheus.Registry
	applies      prometheus.Counter
	conflicts    prometheus.Counter
	joins        *prometheus.CounterVec
	authFailures prometheus.Counter
	membersUp    prometheus.Gauge
	loginRefused *prometheus.CounterVec
	lockouts     *prometheus.CounterVec
	healthChecks prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg:          obs.NewRegistry(),
		applies:      prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_mgmt_applies_total", Help: "Configuration versions stored (apply, rollback, tx)."}),
		conflicts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_mgmt_conflicts_total", Help: "Changes refused for a stale base version (409)."}),
		joins:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_mgmt_joins_total", Help: "Join attempts by result (ok, refused)."}, []string{"result"}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_mgmt_auth_failures_total", Help: "Requests refused for a missing, bad, expired or revoked token, and failed logins."}),
		membersUp:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "corral_mgmt_members_up", Help: "Members that reported within the member timeout."}),
		loginRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_mgmt_login_refused_total",
			Help: "Logins answered 429 without a password check, by reason (locked: the user or source is locked out; busy: checks for it or all slots taken)."}, []string{"reason"}),
		lockouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_mgmt_login_lockouts_total",
			Help: "Lockouts started by failed logins, by what is locked out (user, source)."}, []string{"kind"}),
		healthChecks: prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_mgmt_health_checks_total",
			Help: "Health checks run against etcd for /healthz (at most one a second, whatever the call rate)."}),
	}
	m.reg.MustRegister(m.applies, m.conflicts, m.joins, m.authFailures, m.membersUp, m.loginRefused, m.lockouts, m.healthChecks)
	return m
}

// handler is the station's HTTP API.
func (s *Station) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.RouteConfig, s.auth(permRead, s.hGetConfig))
	mux.HandleFunc("PUT "+api.RouteConfig, s.auth(permAdmin, s.hApply))
	mux.HandleFunc("GET "+api.RouteVersion+"{n}", s.auth(permRead, s.hVersion))
	mux.HandleFunc("GET "+api.RouteHistory, s.auth(permRead, s.hHistory))
	mux.HandleFunc("POST "+api.RouteDiff, s.auth(permRead, s.hDiffPost))
	mux.HandleFunc("GET "+api.RouteDiff, s.auth(permRead, s.hDiffGet))
	mux.HandleFunc("POST "+api.RouteRollback, s.auth(permAdmin, s.hRollback))
	mux.HandleFunc("POST "+api.RouteTx, s.auth(permAdmin, s.hTx))
	mux.HandleFunc("GET "+api.RouteSchema, s.auth(permRead, s.hSchema))

	mux.HandleFunc("POST "+api.RouteJoin, s.hJoin)
	mux.HandleFunc("GET "+api.RouteDesired, s.auth(permMember, s.hDesired))
	mux.HandleFunc("POST "+api.RouteReport, s.auth(permMember, s.hReport))
	mux.HandleFunc("GET "+api.RouteMembers, s.auth(permRead, s.hMembers))
	mux.HandleFunc("GET "+api.RouteSD, s.auth(permRead, s.hSD))
	mux.HandleFunc("GET "+api.RouteAudit, s.auth(permRead, s.hAudit))
	mux.HandleFunc("GET "+api.RouteBackup, s.auth(permAdmin, s.hBackup))
	mux.HandleFunc("GET "+api.RouteFeedback, s.auth(permRead, s.hFeedback))

	mux.HandleFunc("POST "+api.RouteLogin, s.hLogin)
	mux.HandleFunc("GET "+api.RouteUsers, s.auth(permRead, s.hUsers))
	mux.HandleFunc("POST "+api.RouteUsers, s.auth(permAdmin, s.hSetUser))
	mux.HandleFunc("DELETE "+api.RouteUser+"{name}", s.auth(permAdmin, s.hDeleteUser))
	mux.HandleFunc("GET "+api.RouteTokens, s.auth(permAdmin, s.hTokens))
	mux.HandleFunc("POST "+api.RouteTokens, s.auth(permAdmin, s.hCreateToken))
	mux.HandleFunc("DELETE "+api.RouteToken+"{id}", s.auth(permAdmin, s.hRevokeToken))

	mux.HandleFunc("GET "+api.RouteHealthz, s.hHealthz)
	mux.Handle("GET "+api.RouteMetrics, obs.MetricsHandler(s.met.reg))

	s.routesDash(mux)
	s.routesUpload(mux)
	s.routesRollout(mux)
	return mux
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// fail answers err as an api.Error with its status.
func (s *Station) fail(w http.ResponseWriter, err error) {
	var (
		ce  *conflictError
		ae  *authError
		fb  *forbidden
		ie  *inputError
		nf  *notFoundError
		ces clustercfg.Errors
		ce1 *clustercfg.Error
		mbe *http.MaxBytesError
		nt  *nameTakenError
		tm  *tooManyError
	)
	body := api.Error{Error: err.Error()}
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &ce):
		status, body.Current = http.StatusConflict, ce.current
	case errors.As(err, &nt):
		status = http.StatusConflict
	case errors.As(err, &tm):
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter(tm.retry)/time.Second)))
	case errors.As(err, &ae):
		status = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
	case errors.As(err, &fb):
		status = http.StatusForbidden
	case errors.As(err, &ie):
		status = http.StatusBadRequest
	case errors.As(err, &nf):
		status = http.StatusNotFound
	case errors.As(err, &mbe):
		status = http.StatusRequestEntityTooLarge
		body.Error = fmt.Sprintf("request body over %d bytes", mbe.Limit)
	case errors.As(err, &ces):
		status = http.StatusBadRequest
		body.Error = "configuration invalid: 1 error"
		if len(ces) != 1 {
			body.Error = fmt.Sprintf("configuration invalid: %d errors", len(ces))
		}
		for _, e := range ces {
			body.Errors = append(body.Errors, api.FieldError{Path: e.Path, Line: e.Line, Msg: e.Msg})
		}
	case errors.As(err, &ce1):
		status = http.StatusBadRequest
		body.Error = "configuration invalid"
		body.Errors = []api.FieldError{{Path: ce1.Path, Line: ce1.Line, Msg: ce1.Msg}}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	}
	if status == http.StatusInternalServerError {
		s.log.Error("request failed", "err", err)
	}
	writeJSON(w, status, body)
}

// decode reads a JSON body of at most limit bytes into v.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	// A body sent a byte at a time would hold a goroutine and a
	// connection for ever (the server has no ReadTimeout: uploads are
	// long): a JSON body gets 10 s plus 1 s per MiB it may have.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(10*time.Second + time.Duration(limit>>20)*time.Second))
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return &inputError{"empty request body: want JSON"}
		}
		return &inputError{"bad JSON body: " + err.Error()}
	}
	// One value: "{...} garbage" or two objects is a broken client.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return &inputError{"bad JSON body: more after the JSON value"}
	}
	return nil
}

func (s *Station) hGetConfig(w http.ResponseWriter, r *http.Request, p *Principal) {
	v, err := s.current(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Station) hApply(w http.ResponseWriter, r *http.Request, p *Principal) {
	var req api.ApplyRequest
	if err := decode(w, r, maxConfig, &req); err != nil {
		s.fail(w, err)
		return
	}
	reply, err := s.apply(r.Context(), req, p.Name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

func (s *Station) hVersion(w http.ResponseWriter, r *http.Request, p *Principal) {
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 {
		s.fail(w, &inputError{fmt.Sprintf("version %q: want a number", r.PathValue("n"))})
		return
	}
	v, err := s.version(r.Context(), n)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// maxLimit bounds ?limit= (history, audit).
const maxLimit = 10000

// limitParam reads ?limit=N (default def, at most maxLimit; 0: maxLimit,
// never "everything": the audit log grows for ever).
func limitParam(r *http.Request, def int) (int, error) {
	q := r.URL.Query().Get("limit")
	if q == "" {
		return def, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 0 {
		return 0, &inputError{fmt.Sprintf("limit %q: want a count", q)}
	}
	if n == 0 {
		return maxLimit, nil
	}
	return min(n, maxLimit), nil
}

func (s *Station) hHistory(w http.ResponseWriter, r *http.Request, p *Principal) {
	n, err := limitParam(r, 100)
	if err != nil {
		s.fail(w, err)
		return
	}
	h, err := s.history(r.Context(), n)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Station) hDiffPost(w http.ResponseWriter, r *http.Request, p *Principal) {
	var req api.ApplyRequest
	if err := decode(w, r, maxConfig, &req); err != nil {
		s.fail(w, err)
		return
	}
	canon, err := validate("config.yaml", []byte(req.YAML))
	if err != nil {
		s.fail(w, asInput(err))
		return
	}
	reply, err := s.diffWith(r.Context(), req.Base, canon)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

func (s *Station) hDiffGet(w http.ResponseWriter, r *http.Request, p *Principal) {
	q := r.URL.Query()
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	to, err2 := strconv.ParseInt(q.Get("to"), 10, 64)
	if err1 != nil || err2 != nil || from < 0 || to < 0 {
		s.fail(w, &inputError{"diff: give ?from=A&to=B (version numbers)"})
		return
	}
	a, err := s.version(r.Context(), from)
	if err != nil {
		s.fail(w, err)
		return
	}
	b, err := s.version(r.Context(), to)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ApplyReply{Version: to, Diff: diffYAML([]byte(a.YAML), []byte(b.YAML)), Unchanged: a.YAML == b.YAML})
}

func (s *Station) hRollback(w http.ResponseWriter, r *http.Request, p *Principal) {
	var req api.RollbackRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		s.fail(w, err)
		return
	}
	reply, err := s.rollback(r.Context(), req, p.Name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

func (s *Station) hTx(w http.ResponseWriter, r *http.Request, p *Principal) {
	var req api.TxRequest
	if err := decode(w, r, maxConfig, &req); err != nil {
		s.fail(w, err)
		return
	}
	reply, err := s.tx(r.Context(), req, p.Name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

func (s *Station) hSchema(w http.ResponseWriter, r *http.Request, p *Principal) {
	w.Header().Set("Content-Type", "application/schema+json")
	w.Write(clustercfg.Schema())
}

func (s *Station) hJoin(w http.ResponseWriter, r *http.Request) {
	var req api.JoinRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		s.fail(w, err)
		return
	}
	reply, err := s.join(r.Context(), bearer(r), req)
	if err != nil {
		var ae *authError
		if errors.As(err, &ae) {
			s.met.authFailures.Inc()
		}
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

func (s *Station) hDesired(w http.ResponseWriter, r *http.Request, p *Principal) {
	after, wait, release, ok := s.longPoll(w, r, p, "a revision")
	if !ok {
		return
	}
	defer release()
	d, err := s.waitDesired(r.Context(), p.Name, after, wait)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Station) hReport(w http.ResponseWriter, r *http.Request, p *Principal) {
	var st api.MemberStatus
	if err := decode(w, r, maxJSON, &st); err != nil {
		s.fail(w, err)
		return
	}
	if st.Name != p.Name {
		s.fail(w, &forbidden{fmt.Sprintf("report names %q but the credential is member %q's", st.Name, p.Name)})
		return
	}
	if st.Role == "" {
		st.Role = p.Role
	}
	if st.Role != p.Role {
		s.fail(w, &forbidden{fmt.Sprintf("report says role %s but the credential is for a %s", st.Role, p.Role)})
		return
	}
	if err := s.report(r.Context(), st); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Station) hMembers(w http.ResponseWriter, r *http.Request, p *Principal) {
	ms, err := s.members(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ms)
}

// sdTargets is the Prometheus HTTP SD list: each member's /metrics and
// every station's.
func (s *Station) sdTargets(ctx context.Context) ([]api.SDTarget, error) {
	ms, err := s.members(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.SDTarget{}
	add := func(raw, role, member string) {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return
		}
		l := map[string]string{"role": role, "member": member}
		if u.Scheme != "" && u.Scheme != "http" {
			l["__scheme__"] = u.Scheme
		}
		if u.Path != "" && u.Path != "/metrics" {
			l["__metrics_path__"] = u.Path
		}
		out = append(out, api.SDTarget{Targets: []string{u.Host}, Labels: l})
	}
	for _, m := range ms {
		if m.Metrics != "" {
			add(m.Metrics, m.Role, m.Name)
		}
	}
	resp, err := s.cli.Get(ctx, keyStations, clientv3.WithPrefix())
	if err == nil {
		for _, kv := range resp.Kvs {
			add(string(kv.Value)+api.RouteMetrics, "mgmt", trimPrefix(kv.Key, keyStations))
		}
	}
	return out, nil
}

func (s *Station) hSD(w http.ResponseWriter, r *http.Request, p *Principal) {
	t, err := s.sdTargets(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Station) hAudit(w http.ResponseWriter, r *http.Request, p *Principal) {
	n, err := limitParam(r, 100)
	if err != nil {
		s.fail(w, err)
		return
	}
	a, err := s.auditLog(r.Context(), n)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Station) hBackup(w http.ResponseWriter, r *http.Request, p *Principal) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="corral-mgmt.backup"`)
	if err := s.Backup(r.Context(), w); err != nil {
		// Headers are gone; a cut file fails its trailer check on restore.
		s.log.Error("backup failed", "err", err)
		return
	}
	s.audit(r.Context(), api.AuditEntry{User: p.Name, Action: "backup"})
}

func (s *Station) hLogin(w http.ResponseWriter, r *http.Request) {
	var req api.LoginRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		s.fail(w, err)
		return
	}
	reply, err := s.login(r.Context(), req, loginSource(r.RemoteAddr))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

func (s *Station) hUsers(w http.ResponseWriter, r *http.Request, p *Principal) {
	u, err := s.users(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

func (s *Station) hSetUser(w http.ResponseWriter, r *http.Request, p *Principal) {
	var req api.UserRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		s.fail(w, err)
		return
	}
	if err := s.setPassword(r.Context(), req, p.Name); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Station) hDeleteUser(w http.ResponseWriter, r *http.Request, p *Principal) {
	if err := s.deleteUser(r.Context(), r.PathValue("name"), p.Name); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Station) hTokens(w http.ResponseWriter, r *http.Request, p *Principal) {
	t, err := s.tokens(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Station) hCreateToken(w http.ResponseWriter, r *http.Request, p *Principal) {
	var req api.TokenRequest
	if err := decode(w, r, maxJSON, &req); err != nil {
		s.fail(w, err)
		return
	}
	t, err := s.createToken(r.Context(), req, p.Name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Station) hRevokeToken(w http.ResponseWriter, r *http.Request, p *Principal) {
	if err := s.revokeToken(r.Context(), r.PathValue("id"), p.Name); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// healthy tells the truth: this station's etcd member answers and knows
// a leader, and a quorum read works.
func (s *Station) healthy(ctx context.Context) error {
	st, err := s.cli.Status(ctx, s.endpoint)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", s.endpoint, err)
	}
	if st.Leader == 0 {
		return fmt.Errorf("etcd %s: no leader", s.endpoint)
	}
	if len(st.Errors) > 0 {
		return fmt.Errorf("etcd %s: %s", s.endpoint, strings.Join(st.Errors, "; "))
	}
	if _, err := s.cli.Get(ctx, keyCurrent); err != nil {
		return fmt.Errorf("etcd quorum read: %w", err)
	}
	return nil
}

// healthEvery is how long a health check's answer is reused: /healthz is
// unauthenticated, so its callers must not drive etcd reads.
const healthEvery = time.Second

// cachedHealth is healthy run at most once per healthEvery; callers
// during a check wait for its answer rather than start their own.
func (s *Station) cachedHealth() error {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if !s.healthAt.IsZero() && time.Since(s.healthAt) < healthEvery {
		return s.healthErr
	}
	// Not the caller's context: its answer is everyone's.
	ctx, cancel := context.WithTimeout(context.Background(), obs.CheckTimeout)
	err := s.healthy(ctx)
	if err == nil && ctx.Err() != nil {
		err = errors.New("health check timed out")
	}
	cancel()
	s.met.healthChecks.Inc()
	switch {
	case err != nil && (s.healthErr == nil || s.healthErr.Error() != err.Error()):
		s.log.Warn("station unhealthy", "err", err)
	case err == nil && s.healthErr != nil:
		s.log.Info("station healthy again")
	}
	s.healthAt, s.healthErr = time.Now(), err
	return err
}

// hHealthz answers "ok" or 503 "unhealthy", nothing more: the reason
// names internal addresses and goes to the station's log.
func (s *Station) hHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.cachedHealth() != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("unhealthy\n"))
		return
	}
	w.Write([]byte("ok\n"))
}
