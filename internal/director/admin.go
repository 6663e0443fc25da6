package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/dataplane/xdp"
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
	XDP     *XDPCounters   `json:"xdp,omitempty"`
	Servers []ServerStatus `json:"servers"`
}

// ServerStatus is one real server in the admin API.
type ServerStatus struct {
	Addr         string `json:"addr"`
	Weight       int    `json:"weight"`        // effective: 0 when down or drained
	ConfigWeight int    `json:"config_weight"` // from the configuration
	Override     int    `json:"override"`      // -1: none (set by ctl weight/drain)
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
}

// Status is the live table.
func (d *Director) Status() []ServiceStatus {
	var out []ServiceStatus
	for _, s := range *d.services.Load() {
		cfg := s.cfg.Load()
		s.expireConns(d.now())
		st := ServiceStatus{Name: cfg.Name, VIP: cfg.VIP.String(), Protocol: cfg.Protocol, Dataplane: cfg.Dataplane,
			Scheduler: cfg.Scheduler, Persistence: cfg.Persistence.String(), NewConns: s.newConns.Load(), Drops: s.drops.Load(), XDP: s.xdp.Load()}
		s.mu.Lock()
		for _, r := range s.reals {
			ss := ServerStatus{Addr: r.addr, Weight: r.weight(), ConfigWeight: int(r.cfgWeight.Load()), Override: int(r.override.Load()),
				Healthy: r.healthy.Load(), Active: r.active.Load(), Inactive: r.inactive.Load(), Connections: r.conns.Load(),
				Requests: r.requests.Load(), Failed: r.failed.Load(), BytesIn: r.bytesIn.Load(), BytesOut: r.bytesOut.Load(), Pending: r.pending.Load(),
				Packets: r.packets.Load()}
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
		return fmt.Errorf("no service %q", service)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reals {
		if r.addr != addr {
			continue
		}
		switch action {
		case "weight":
			if w < 0 || w > 65535 {
				return fmt.Errorf("weight %d: want 0..65535", w)
			}
			r.override.Store(int64(w))
		case "drain":
			r.override.Store(0)
		case "enable":
			r.override.Store(-1)
		default:
			return fmt.Errorf("unknown action %q (want weight, drain or enable)", action)
		}
		d.log.Info("real server changed", "service", service, "server", addr, "action", action, "weight", r.weight())
		d.pokeXDP()
		return nil
	}
	return fmt.Errorf("service %q has no real server %s", service, addr)
}

// DirectorStatus is the director as a whole in the admin API.
type DirectorStatus struct {
	Reload *ReloadStatus `json:"reload"` // the last load of the configuration file
}

// Handler is the admin API: GET /api/services, GET /api/status, POST
// /api/services/NAME/servers/ADDR?action=weight&weight=N|drain|enable,
// GET /metrics (Prometheus text), GET /healthz.
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
		if err := d.SetServer(r.PathValue("service"), r.PathValue("addr"), action, wt); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		d.writeMetrics(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	// Profiles, for finding where the director spends its time; the admin
	// API listens on loopback only.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

func (d *Director) writeMetrics(w http.ResponseWriter) {
	type metric struct{ name, typ, help string }
	ms := []metric{
		{"corral_director_server_up", "gauge", "1 if the real server passes its health check"},
		{"corral_director_server_weight", "gauge", "effective scheduling weight"},
		{"corral_director_active_connections", "gauge", "established connections (l7: requests in progress)"},
		{"corral_director_inactive_connections", "gauge", "half-closed connections"},
		{"corral_director_connections_total", "counter", "connections (l7: responses) sent to the real server"},
		{"corral_director_requests_total", "counter", "HTTP requests answered by the real server (l7)"},
		{"corral_director_failures_total", "counter", "connects or requests to the real server that failed"},
		{"corral_director_bytes_in_total", "counter", "bytes from clients to the real server"},
		{"corral_director_bytes_out_total", "counter", "bytes from the real server to clients"},
	}
	st := d.Status()
	for i, m := range ms {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, s := range st {
			for _, r := range s.Servers {
				v := []int64{b2i(r.Healthy), int64(r.Weight), r.Active, r.Inactive, r.Connections, r.Requests, r.Failed, r.BytesIn, r.BytesOut}[i]
				fmt.Fprintf(w, "%s{service=%q,server=%q} %d\n", m.name, s.Name, r.Addr, v)
			}
		}
	}
	fmt.Fprintf(w, "# HELP corral_director_drops_total new flows with no real server available\n# TYPE corral_director_drops_total counter\n")
	for _, s := range st {
		fmt.Fprintf(w, "corral_director_drops_total{service=%q} %d\n", s.Name, s.Drops)
	}
	fmt.Fprintf(w, "# HELP corral_director_xdp_packets_total frames of the service seen by the XDP dataplane\n# TYPE corral_director_xdp_packets_total counter\n")
	for _, s := range st {
		if s.XDP != nil {
			fmt.Fprintf(w, "corral_director_xdp_packets_total{service=%q} %d\n", s.Name, s.XDP.Packets)
		}
	}
	fmt.Fprintf(w, "# HELP corral_director_xdp_drops_total frames the XDP dataplane dropped, by reason\n# TYPE corral_director_xdp_drops_total counter\n")
	for _, s := range st {
		if s.XDP != nil {
			for _, reason := range xdp.DropReasons {
				fmt.Fprintf(w, "corral_director_xdp_drops_total{service=%q,reason=%q} %d\n", s.Name, reason, s.XDP.Drops[reason])
			}
		}
	}
	if p := d.xdp.Load(); p != nil {
		if g, err := p.dp.Global(); err == nil {
			fmt.Fprintf(w, "# HELP corral_director_xdp_passed_total frames the XDP dataplane left to the kernel, by why\n# TYPE corral_director_xdp_passed_total counter\n")
			for _, x := range []struct {
				why string
				n   uint64
			}{{"not_a_service", g.Passed}, {"malformed", g.Malformed}, {"fragment", g.Fragments}} {
				fmt.Fprintf(w, "corral_director_xdp_passed_total{why=%q} %d\n", x.why, x.n)
			}
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
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
	if err := checkAdmin(path, cfg); err != nil {
		return err
	}
	d := New(log)
	for _, o := range opts {
		o(d)
	}
	if err := d.Apply(cfg); err != nil {
		d.Close()
		return err
	}
	d.reload.Store(&ReloadStatus{Time: time.Now(), OK: true, File: path, Stamp: stamp})
	defer d.Close()
	ln, err := net.Listen("tcp", cfg.Admin)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	admin := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go admin.Serve(ln)
	defer admin.Close()
	if ready != nil {
		ready(ln.Addr().String())
	}
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

// Client talks to a director's admin API (corral ctl).
type Client struct {
	Base string
	HTTP *http.Client // nil: http.DefaultClient
}

func (c Client) do(req *http.Request) (*http.Response, error) {
	if c.HTTP != nil {
		return c.HTTP.Do(req)
	}
	return http.DefaultClient.Do(req)
}

func (c Client) Services(ctx context.Context) ([]ServiceStatus, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/api/services", nil)
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %s", c.Base, resp.Status)
	}
	var out []ServiceStatus
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// Status is the director's own state (GET /api/status).
func (c Client) Status(ctx context.Context) (*DirectorStatus, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/api/status", nil)
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %s", c.Base, resp.Status)
	}
	var out DirectorStatus
	return &out, json.NewDecoder(resp.Body).Decode(&out)
}

func (c Client) SetServer(ctx context.Context, service, addr, action string, w int) error {
	u := fmt.Sprintf("%s/api/services/%s/servers/%s?action=%s&weight=%d", c.Base, service, addr, action, w)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return errors.New(strings.TrimSpace(b.String()))
	}
	return nil
}
