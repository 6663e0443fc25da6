package mgmt

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// The dashboard: the page ("/", assets under /ui/), RouteStatus (the
// overview as JSON), RouteEvents (the overview every second and each event,
// as Server-Sent Events) and RouteDrain. docs/dashboard.md.
//
// Browser auth: the page keeps the API token (typed in, or traded for a
// password at RouteLogin) in sessionStorage and sends it as the bearer on
// every fetch, the event stream included (fetch with a streamed body, not
// EventSource, which cannot send headers). No cookie is ever set, so a
// foreign page cannot make the browser send the token: no CSRF.

//go:embed web
var dashWeb embed.FS

// dashSource is what the dashboard reads and changes: *Station in
// production (store.go); tests feed their own.
type dashSource interface {
	current(ctx context.Context) (api.Version, error)
	members(ctx context.Context) ([]api.MemberStatus, error)
	drained(ctx context.Context) ([]string, error)
	setDrain(ctx context.Context, node string, drain bool, who string) error
	recentEvents(n int) []api.Event
	subscribe() (<-chan api.Event, func())
	// feedbackPub is the latest load feedback publication (nil: none).
	feedbackPub() *director.FeedbackStatus
}

// dashAuth wraps a handler with authentication (Station.auth in production).
type dashAuth func(need string, h func(w http.ResponseWriter, r *http.Request, p *Principal)) http.HandlerFunc

// fsStatusFunc reads the file system's I/O servers and metadata members
// from the metadata members meta.
type fsStatusFunc func(ctx context.Context, meta []string) ([]api.IOServer, []api.MetaMember, error)

// Limits of the event stream.
const (
	dashMaxStreams   = 64               // concurrent event streams; more get 503
	dashMaxPerUser   = 8                // of which one user's or member's; more get 429
	dashWriteTimeout = 5 * time.Second  // a client that takes longer to take one frame is dropped
	dashHeartbeat    = 15 * time.Second // comment line that keeps proxies from closing an idle stream
	dashCacheFor     = time.Second      // the overview is computed at most once per this
	dashMaxBody      = 4 << 10          // a drain request's body
)

// dashRecheck is how often an open event stream's token is checked again:
// a token revoked or expired, or a user removed, loses the stream.
var dashRecheck = 5 * time.Second

// dash serves the dashboard over a source.
type dash struct {
	src      dashSource
	auth     dashAuth
	fs       fsStatusFunc
	meta     []string // metadata members given to the station (else the configuration's)
	stations func() []string
	log      *slog.Logger
	// recheck authenticates a request again (nil: never); an event stream
	// whose token it refuses ends.
	recheck func(r *http.Request) error

	// Knobs tests turn; zero: the constants above, time.Now.
	tick         time.Duration // overview interval on the stream (1 s)
	heartbeat    time.Duration
	writeTimeout time.Duration
	cacheFor     time.Duration
	clock        func() time.Time
	streams      atomic.Int32 // event streams open now
	perMu        sync.Mutex
	per          map[string]int // event streams open now per principal

	mu         sync.Mutex // held while computing, so concurrent callers share one computation
	live       dashLive
	cached     *dashStatus
	cachedJSON []byte
	at         time.Time
}

// routesDash registers the dashboard ("/"), RouteStatus, RouteEvents and RouteDrain.
func (s *Station) routesDash(mux *http.ServeMux) {
	s.newDash().routes(mux)
}

// newDash is the station's dashboard, over the station's store and auth.
func (s *Station) newDash() *dash {
	probe := &pfsProbe{secret: s.opt.Secret}
	recheck := func(r *http.Request) error {
		_, err := s.principal(r)
		var ae *authError
		if errors.As(err, &ae) {
			return err
		}
		return nil // the store's trouble is not the token's
	}
	return &dash{src: s, auth: s.auth, fs: probe.status, meta: s.opt.Meta, stations: s.stationAddrs, log: s.log, recheck: recheck}
}

func (d *dash) routes(mux *http.ServeMux) {
	if d.tick == 0 {
		d.tick = time.Second
	}
	if d.heartbeat == 0 {
		d.heartbeat = dashHeartbeat
	}
	if d.writeTimeout == 0 {
		d.writeTimeout = dashWriteTimeout
	}
	if d.cacheFor == 0 {
		d.cacheFor = dashCacheFor
	}
	if d.clock == nil {
		d.clock = time.Now
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	assets, _ := fs.Sub(dashWeb, "web")
	files := http.FileServer(http.FS(assets))
	mux.Handle("/{$}", dashHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			dashError(w, http.StatusMethodNotAllowed, "the dashboard page: GET only")
			return
		}
		http.ServeFileFS(w, r, assets, "index.html")
	})))
	mux.Handle("/ui/", dashHeaders(http.StripPrefix("/ui/", files)))
	mux.Handle(api.RouteStatus, d.auth(permRead, d.handleStatus))
	mux.Handle(api.RouteEvents, d.auth(permRead, d.handleEvents))
	mux.Handle(api.RouteDrain, d.auth(permAdmin, d.handleDrain))
}

// dashHeaders are the page's: only its own scripts, styles and connections;
// never in a frame.
func dashHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

func dashError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(api.Error{Error: msg})
}

// status is the overview, computed at most once per dashCacheFor, and
// its JSON (encoded once for every stream and caller).
func (d *dash) status(ctx context.Context) (*dashStatus, []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cached != nil && time.Since(d.at) < d.cacheFor {
		return d.cached, d.cachedJSON
	}
	// Shared by every caller: the first one going away must not cut it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	st := buildStatus(ctx, d.src, d.fs, d.meta, d.stations)
	st.Time = d.clock().UTC()
	d.live.apply(ctx, st, st.Time)
	b, err := json.Marshal(st)
	if err != nil { // cannot happen with these types; say so rather than send nothing
		b, _ = json.Marshal(api.Error{Error: "overview: " + err.Error()})
	}
	d.cached, d.cachedJSON, d.at = st, b, time.Now()
	return st, b
}

func (d *dash) handleStatus(w http.ResponseWriter, r *http.Request, _ *Principal) {
	if r.Method != http.MethodGet {
		dashError(w, http.StatusMethodNotAllowed, api.RouteStatus+": GET only")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, b := d.status(r.Context())
	// b is shared by every caller: appending to it would write into its
	// spare capacity from several handlers at once.
	w.Write(b)
	w.Write([]byte{'\n'})
}

// handleEvents streams "overview" every tick and each "event" as it
// happens, until the client goes. Frames are written straight to the
// connection with a deadline: a client that does not take them is dropped,
// nothing queues up for it here (the subscription's channel is the store's,
// bounded there).
func (d *dash) handleEvents(w http.ResponseWriter, r *http.Request, p *Principal) {
	if r.Method != http.MethodGet {
		dashError(w, http.StatusMethodNotAllowed, api.RouteEvents+": GET only")
		return
	}
	// One user (or member) cannot take every stream from the others.
	who := "user " + p.Name
	if p.Member {
		who = "member " + p.Name
	}
	d.perMu.Lock()
	if d.per == nil {
		d.per = map[string]int{}
	}
	if d.per[who] >= dashMaxPerUser {
		d.perMu.Unlock()
		dashError(w, http.StatusTooManyRequests, fmt.Sprintf("%s: %s already has %d event streams open", api.RouteEvents, who, dashMaxPerUser))
		return
	}
	d.per[who]++
	d.perMu.Unlock()
	defer func() {
		d.perMu.Lock()
		if d.per[who]--; d.per[who] <= 0 {
			delete(d.per, who)
		}
		d.perMu.Unlock()
	}()
	if d.streams.Add(1) > dashMaxStreams {
		d.streams.Add(-1)
		dashError(w, http.StatusServiceUnavailable, fmt.Sprintf("%s: already %d event streams open", api.RouteEvents, dashMaxStreams))
		return
	}
	defer d.streams.Add(-1)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	evs, cancel := d.src.subscribe()
	defer cancel()
	send := func(frame []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(d.writeTimeout))
		if _, err := w.Write(frame); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	overview := func() bool {
		_, b := d.status(r.Context())
		return send(sseFrame("overview", b))
	}
	if !send([]byte("retry: 2000\n\n")) || !overview() {
		return
	}
	tick := time.NewTicker(d.tick)
	defer tick.Stop()
	beat := time.NewTicker(d.heartbeat)
	defer beat.Stop()
	checked := time.Now()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if d.recheck != nil && time.Since(checked) >= dashRecheck {
				checked = time.Now()
				if err := d.recheck(r); err != nil {
					b, _ := json.Marshal(api.Error{Error: err.Error()})
					send(sseFrame("error", b))
					return
				}
			}
			if !overview() {
				return
			}
		case <-beat.C:
			if !send([]byte(": heartbeat\n\n")) {
				return
			}
		case e, ok := <-evs:
			if !ok { // the store dropped this subscriber (or is closing)
				return
			}
			b, _ := json.Marshal(e)
			if !send(sseFrame("event", b)) {
				return
			}
		}
	}
}

// sseFrame is one Server-Sent Event; data is JSON, one line.
func sseFrame(name string, data []byte) []byte {
	f := make([]byte, 0, len(name)+len(data)+16)
	f = append(f, "event: "...)
	f = append(f, name...)
	f = append(f, "\ndata: "...)
	f = append(f, data...)
	return append(f, "\n\n"...)
}

func (d *dash) handleDrain(w http.ResponseWriter, r *http.Request, p *Principal) {
	if r.Method != http.MethodPost {
		dashError(w, http.StatusMethodNotAllowed, api.RouteDrain+": POST only")
		return
	}
	var req api.DrainRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, dashMaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			dashError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: body over %d bytes", api.RouteDrain, dashMaxBody))
			return
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("empty body")
		}
		dashError(w, http.StatusBadRequest, fmt.Sprintf("%s: bad DrainRequest JSON: %v", api.RouteDrain, err))
		return
	}
	if err := checkNodeName(req.Node); err != nil {
		dashError(w, http.StatusBadRequest, fmt.Sprintf("%s: node: %v", api.RouteDrain, err))
		return
	}
	known, err := d.knownNode(r.Context(), req.Node)
	if err != nil {
		dashError(w, http.StatusServiceUnavailable, fmt.Sprintf("%s: %v", api.RouteDrain, err))
		return
	}
	if !known {
		dashError(w, http.StatusNotFound, fmt.Sprintf("%s: no node named %q in the configuration or among the members", api.RouteDrain, req.Node))
		return
	}
	if err := d.src.setDrain(r.Context(), req.Node, req.Drain, p.Name); err != nil {
		dashError(w, http.StatusInternalServerError, fmt.Sprintf("%s: %v", api.RouteDrain, err))
		return
	}
	d.mu.Lock()
	d.cached = nil // the next overview shows it
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(req)
}

// checkNodeName refuses names no configuration could hold.
func checkNodeName(n string) error {
	if n == "" {
		return errors.New("empty")
	}
	if len(n) > 253 {
		return fmt.Errorf("%d bytes long (at most 253)", len(n))
	}
	if i := strings.IndexFunc(n, func(c rune) bool { return c <= ' ' || c == 0x7f || c > 0x7e }); i >= 0 {
		return fmt.Errorf("%q has a space, control or non-ASCII character at byte %d", n, i)
	}
	return nil
}

// knownNode says whether name is a node of the current configuration or a
// node member; drained names the operator cannot see are mistakes.
func (d *dash) knownNode(ctx context.Context, name string) (bool, error) {
	ms, err := d.src.members(ctx)
	if err != nil {
		return false, fmt.Errorf("members: %w", err)
	}
	for _, m := range ms {
		if m.Role == api.RoleNode && m.Name == name {
			return true, nil
		}
	}
	if dr, err := d.src.drained(ctx); err == nil && slices.Contains(dr, name) {
		return true, nil // undraining one no longer configured
	}
	v, err := d.src.current(ctx)
	if err != nil {
		return false, fmt.Errorf("current configuration: %w", err)
	}
	cfg, err := dashConfig(v)
	if err != nil {
		return false, err
	}
	for _, n := range cfg.Nodes {
		if n.Name == name {
			return true, nil
		}
	}
	return false, nil
}
