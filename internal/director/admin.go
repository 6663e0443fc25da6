package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/ha"
)

// ServiceStatus is one service in the admin API.
type ServiceStatus struct {
	Name        string `json:"name"`
	VIP         string `json:"vip"`
	Protocol    string `json:"protocol"`
	Dataplane   string `json:"dataplane"`
	Scheduler   string `json:"scheduler"`
	Persistence string `json:"persistence"`
	NewConns    int64  `json:"new_connections"`
	Drops       int64  `json:"drops"`
	// XDP holds the kernel dataplane's counters (dataplane xdp only).
	XDP *XDPCounters `json:"xdp,omitempty"`
	// L4 holds the l4 dataplane's flows, caps and refusals (l4 only).
	L4 *L4Status `json:"l4,omitempty"`
	// Rate: new connections and bytes per second over the last
	// RateInterval (bytes summed over the servers).
	Rate    Rate           `json:"rate"`
	Servers []ServerStatus `json:"servers"`
}

// ServerStatus is one real server in the admin API.
type ServerStatus struct {
	Addr         string `json:"addr"`
	Weight       int    `json:"weight"`        // effective: 0 when down or drained
	ConfigWeight int    `json:"config_weight"` // from the configuration
	Override     int    `json:"override"`      // -1: none (set by ctl weight/drain)
	Feedback     int    `json:"feedback"`      // -1: none; the feedback controller's weight
	Healthy      bool   `json:"healthy"`
	LastError    string `json:"last_error,omitempty"`
	Active       int64  `json:"active"`
	Inactive     int64  `json:"inactive"`
	Connections  int64  `json:"connections"`
	Requests     int64  `json:"requests"`
	Failed       int64  `json:"failed"`
	BytesIn      int64  `json:"bytes_in"`
	BytesOut     int64  `json:"bytes_out"`
	Pending      int64  `json:"pending_bytes"`
	Packets      int64  `json:"packets,omitempty"` // xdp: frames forwarded to it
	Rate         Rate   `json:"rate"`              // connections and bytes per second
}

// Status is the live table.
func (d *Director) Status() []ServiceStatus {
	var out []ServiceStatus
	for _, s := range *d.services.Load() {
		cfg := s.cfg.Load()
		s.expireConns(d.now())
		st := ServiceStatus{Name: cfg.Name, VIP: cfg.VIP.String(), Protocol: cfg.Protocol, Dataplane: cfg.Dataplane,
			Scheduler: cfg.Scheduler, Persistence: cfg.Persistence.String(), NewConns: s.newConns.Load(), Drops: s.drops.Load(), XDP: s.xdp.Load(),
			L4: s.l4Status(), Rate: d.rates.get(cfg.Name, "")}
		s.mu.Lock()
		for _, r := range s.reals {
			ss := ServerStatus{Addr: r.addr, Weight: r.weight(), ConfigWeight: int(r.cfgWeight.Load()), Override: int(r.override.Load()),
				Feedback: int(r.fb.Load()), Healthy: r.healthy.Load(), Active: r.active.Load(), Inactive: r.inactive.Load(), Connections: r.conns.Load(),
				Requests: r.requests.Load(), Failed: r.failed.Load(), BytesIn: r.bytesIn.Load(), BytesOut: r.bytesOut.Load(), Pending: r.pending.Load(),
				Packets: r.packets.Load(), Rate: d.rates.get(cfg.Name, r.addr)}
			if r.checker != nil {
				if _, err := r.checker.State(); err != nil {
					ss.LastError = err.Error()
				}
			}
			st.Servers = append(st.Servers, ss)
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SetServer changes one real server at run time: action is "weight" (with
// w), "drain" (weight 0: no new connections) or "enable" (back to the
// configured weight).
func (d *Director) SetServer(service, addr, action string, w int) error {
	s := (*d.services.Load())[service]
	if s == nil {
		return notFound(fmt.Sprintf("no service %q", service))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reals {
		if r.addr != addr {
			continue
		}
		o := -1 // enable: back to the configured weight
		switch action {
		case "weight":
			if w < 0 || w > 65535 {
				return fmt.Errorf("weight %d: want 0..65535", w)
			}
			o = w
		case "drain":
			o = 0
		case "enable":
		default:
			return fmt.Errorf("unknown action %q (want weight, drain or enable)", action)
		}
		if err := d.ovr.record(service, addr, o); err != nil {
			return err
		}
		r.override.Store(int64(o))
		d.log.Info("real server changed", "service", service, "server", addr, "action", action, "weight", r.weight())
		d.pokeXDP()
		return nil
	}
	return notFound(fmt.Sprintf("service %q has no real server %s", service, addr))
}

// DirectorStatus is the director as a whole in the admin API.
type DirectorStatus struct {
	Reload *ReloadStatus `json:"reload"` // the last load of the configuration file
}

// ConnStatus is one entry of the connection table in the admin API.
type ConnStatus struct {
	Proto   string  `json:"proto"`
	Service string  `json:"service"`
	Client  string  `json:"client"`
	VIP     string  `json:"vip"`
	Real    string  `json:"real"`
	State   string  `json:"state"`
	Expires float64 `json:"expires_sec"` // seconds until the entry expires
}

// Handler is the admin API's routes: GET /api/services, GET /api/status, GET /api/conns,
// POST /api/services/NAME/servers/ADDR?action=weight&weight=N|drain|enable,
// PUT (add, ?weight=N) and DELETE (remove) on the same path, GET /metrics
// (Prometheus text), GET /healthz (with the HA state; 503 when fenced),
// GET /api/ha (ha.Status), POST /api/ha/handover?to=NAME, GET /api/feedback
// (FeedbackStatus; 404 without a feedback block). Run serves it
// behind Guard.
func (d *Director) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/services", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(d.Status())
	})
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(DirectorStatus{Reload: d.ReloadStatus()})
	})
	mux.HandleFunc("GET /api/conns", func(w http.ResponseWriter, r *http.Request) {
		out := []ConnStatus{}
		for _, c := range d.Conns() {
			out = append(out, ConnStatus{Proto: c.Proto, Service: c.Service, Client: c.Client, VIP: c.VIP, Real: c.Real, State: c.State, Expires: c.Expires.Seconds()})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("PUT /api/services/{service}/servers/{addr}", func(w http.ResponseWriter, r *http.Request) {
		wt := 1
		if v := r.URL.Query().Get("weight"); v != "" {
			var err error
			if wt, err = strconv.Atoi(v); err != nil {
				http.Error(w, "weight: not a number", http.StatusBadRequest)
				return
			}
		}
		apiResult(w, d.AddServer(r.PathValue("service"), r.PathValue("addr"), wt))
	})
	mux.HandleFunc("DELETE /api/services/{service}/servers/{addr}", func(w http.ResponseWriter, r *http.Request) {
		apiResult(w, d.RemoveServer(r.PathValue("service"), r.PathValue("addr")))
	})
	mux.HandleFunc("POST /api/services/{service}/servers/{addr}", func(w http.ResponseWriter, r *http.Request) {
		action := r.URL.Query().Get("action")
		wt := 0
		if action == "weight" {
			var err error
			if wt, err = strconv.Atoi(r.URL.Query().Get("weight")); err != nil {
				http.Error(w, "weight: not a number", http.StatusBadRequest)
				return
			}
		}
		apiResult(w, d.SetServer(r.PathValue("service"), r.PathValue("addr"), action, wt))
	})
	mux.HandleFunc("GET /api/feedback", func(w http.ResponseWriter, r *http.Request) {
		st, err := d.FeedbackStatus()
		if err != nil {
			apiResult(w, notFound(err.Error()))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.Handle("GET /metrics", d.MetricsHandler())
	mux.HandleFunc("GET /healthz", d.serveHealthz)
	mux.HandleFunc("GET /api/ha", func(w http.ResponseWriter, r *http.Request) {
		st, err := d.HAStatus()
		if err != nil {
			apiResult(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /api/ha/handover", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), handoverTimeout)
		defer cancel()
		res, err := d.Handover(ctx, r.URL.Query().Get("to"))
		if err != nil {
			apiResult(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(res)
	})
	// Profiles, for finding where the director spends its time; Guard
	// wants the token for them even on loopback.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

// apiResult answers a mutating call: 204, or the error as text with 404
// for a service or server that does not exist and 400 otherwise.
func apiResult(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.As(err, new(notFound)):
		http.Error(w, err.Error(), http.StatusNotFound)
	default:
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

// Run loads the configuration at path, serves it and the admin API until
// ctx ends, and reloads on SIGHUP or when the file changes. A bad new
// configuration is logged with its place and the running one stays.
func Run(ctx context.Context, path string, log *slog.Logger, ready func(admin string), opts ...RunOption) error {
	stamp := fileStamp(path) // of the file as loaded: later changes reload
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	var ro runOptions
	for _, o := range opts {
		o(&ro)
	}
	if ro.tokenFile == "" {
		ro.tokenFile = DefaultTokenFile(path)
	}
	if log == nil {
		log = slog.Default()
	}
	d := New(log)
	if ro.sizes != nil {
		d.SetSizeSource(ro.sizes)
	}
	d.SetInsecureSync(ro.insecure)
	if err := d.SetOverridesFile(OverridesFile(ro.tokenFile)); err != nil {
		return err
	}
	if err := d.Apply(cfg); err != nil {
		d.Close()
		return err
	}
	d.reload.Store(&ReloadStatus{Time: time.Now(), OK: true, File: path, Stamp: stamp})
	defer d.Close()
	stopAdmin, err := d.serveAdmin(ctx, cfg.Admin, ro.tokenFile, ready)
	if err != nil {
		return err
	}
	defer stopAdmin()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
		case <-tick.C:
			s := fileStamp(path)
			if s == stamp {
				continue
			}
			// Let a writer finish: a half-written file may parse.
			time.Sleep(200 * time.Millisecond)
			if fileStamp(path) != s {
				continue
			}
		}
		stamp = fileStamp(path)
		d.reloadFrom(path, stamp)
	}
}

// serveAdmin serves the admin API on addr (behind Guard, with the token
// in tokenFile, made if missing) and samples the rates, until stop.
func (d *Director) serveAdmin(ctx context.Context, addr, tokenFile string, ready func(admin string)) (stop func(), err error) {
	// Mutating calls always need the token; it is made before anything
	// listens, so the API is never open. Off loopback reads need it too.
	token, err := EnsureToken(tokenFile)
	if err != nil {
		return nil, err
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("admin API address %q: want IP:PORT", addr)
	}
	loopback := ap.Addr().IsLoopback()
	if !loopback {
		d.log.Warn("admin API on a non-loopback address: every call needs the token", "admin", addr, "token_file", tokenFile)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	d.admin.Store(ln.Addr().String())
	admin := &http.Server{Handler: Guard(token, loopback, d.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go admin.Serve(ln)
	rctx, stopRates := context.WithCancel(ctx)
	go d.sampleRates(rctx)
	if ready != nil {
		ready(ln.Addr().String())
	}
	return func() { stopRates(); admin.Close() }, nil
}

// Client talks to a director's admin API (corral ctl).
type Client struct {
	Base  string
	HTTP  *http.Client // nil: http.DefaultClient
	Token string       // bearer token: needed for changes ("" sends none)
	// TokenFile names where Token came from, or where it was looked for,
	// in errors.
	TokenFile string
}

// APIError is a refusal from the admin API.
type APIError struct {
	Status int
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

func (c Client) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // not the method and URL again
		}
		return nil, fmt.Errorf("director admin API at %s: %w (is the director running there? --admin)", strings.TrimPrefix(c.Base, "http://"), err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	msg := strings.TrimSpace(string(b))
	if resp.StatusCode == http.StatusUnauthorized {
		switch {
		case c.Token == "" && c.TokenFile != "":
			msg = fmt.Sprintf("401: the director wants its admin token and %s has none: pass --token-file (the director writes %s beside its configuration)", c.TokenFile, TokenFileName)
		case c.Token == "":
			msg = fmt.Sprintf("401: the director wants its admin token: pass --token-file (the director writes %s beside its configuration)", TokenFileName)
		default:
			msg = fmt.Sprintf("401: the director refused the admin token from %s: pass --token-file with the director's %s", c.TokenFile, TokenFileName)
		}
	} else if msg == "" {
		msg = resp.Status
	}
	return nil, &APIError{Status: resp.StatusCode, Msg: msg}
}

func getJSON[T any](ctx context.Context, c Client, path string) (T, error) {
	var out T
	resp, err := c.do(ctx, http.MethodGet, path)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("director admin API at %s%s: %w", c.Base, path, err)
	}
	return out, nil
}

// Services is the live table.
func (c Client) Services(ctx context.Context) ([]ServiceStatus, error) {
	return getJSON[[]ServiceStatus](ctx, c, "/api/services")
}

// Status is the director's own state (GET /api/status).
func (c Client) Status(ctx context.Context) (*DirectorStatus, error) {
	st, err := getJSON[DirectorStatus](ctx, c, "/api/status")
	return &st, err
}

// Conns is the connection table.
func (c Client) Conns(ctx context.Context) ([]ConnStatus, error) {
	return getJSON[[]ConnStatus](ctx, c, "/api/conns")
}

func (c Client) change(ctx context.Context, method, path string) error {
	resp, err := c.do(ctx, method, path)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func serverPath(service, addr string) string {
	return "/api/services/" + url.PathEscape(service) + "/servers/" + url.PathEscape(addr)
}

// SetServer changes a real server's weight: action weight (with w), drain
// or enable.
func (c Client) SetServer(ctx context.Context, service, addr, action string, w int) error {
	q := url.Values{"action": {action}, "weight": {strconv.Itoa(w)}}
	return c.change(ctx, http.MethodPost, serverPath(service, addr)+"?"+q.Encode())
}

// AddServer adds a real server to a running service.
func (c Client) AddServer(ctx context.Context, service, addr string, w int) error {
	return c.change(ctx, http.MethodPut, serverPath(service, addr)+"?weight="+strconv.Itoa(w))
}

// HA is the director's HA group as it sees it (GET /api/ha); an
// *APIError with Status 404 when HA is off.
func (c Client) HA(ctx context.Context) (ha.Status, error) {
	return getJSON[ha.Status](ctx, c, "/api/ha")
}

// Handover asks the active director to hand the VIPs to another (to "":
// the best in-sync one by priority) and says who took over and how long it
// took. It needs the admin token.
func (c Client) Handover(ctx context.Context, to string) (HandoverResult, error) {
	var out HandoverResult
	p := "/api/ha/handover"
	if to != "" {
		p += "?to=" + url.QueryEscape(to)
	}
	resp, err := c.do(ctx, http.MethodPost, p)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return out, fmt.Errorf("director admin API at %s%s: %w", c.Base, p, err)
	}
	return out, nil
}

// Feedback is the feedback monitor's latest decisions (GET /api/feedback);
// an *APIError with Status 404 when no feedback block runs.
func (c Client) Feedback(ctx context.Context) (FeedbackStatus, error) {
	return getJSON[FeedbackStatus](ctx, c, "/api/feedback")
}

// RemoveServer removes a real server from a running service.
func (c Client) RemoveServer(ctx context.Context, service, addr string) error {
	return c.change(ctx, http.MethodDelete, serverPath(service, addr))
}
