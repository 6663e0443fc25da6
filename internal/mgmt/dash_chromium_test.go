package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/feedback"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// dashLogin is how openDashboard logs in: a token, or a user and password
// (traded at /v1/login by the page).
type dashLogin struct {
	Token, User, Password string
}

// openDashboard starts a headless Chromium (the test skips without one),
// opens the dashboard at base (http or https: certificate errors are
// ignored, the station's CA being the test's own), logs in and waits until
// the page has drawn an overview. The browser is stopped by t.Cleanup.
// Run further actions with chromedp.Run on the returned context, bounding
// each with a context.WithTimeout derived from it.
func openDashboard(t testing.TB, base string, login dashLogin) context.Context {
	t.Helper()
	path := lab.ChromiumPath()
	lab.Need(t, lab.Chromium)
	var out bytes.Buffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("TMPDIR="+t.TempDir()), // its singleton socket directory goes with the test
		chromedp.WindowSize(1440, 1000),
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.CombinedOutput(&out),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()      // closes the browser
		cancelAlloc() // waits for its process to end
		if t.Failed() && out.Len() > 0 {
			t.Logf("chromium's output:\n%s", lastLines(out.String(), 30))
		}
	})
	// The first Run starts the browser: no timeout on it (it would stop
	// the browser), so start it with a bounded wait of its own.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting chromium: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("chromium did not start within 60 s")
	}

	steps := []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/"), chromedp.WaitVisible(chromedp.ID("login-form"))}
	if login.Token != "" {
		steps = append(steps, chromedp.SetValue(chromedp.ID("login-token"), login.Token))
	} else {
		steps = append(steps, chromedp.SetValue(chromedp.ID("login-user"), login.User), chromedp.SetValue(chromedp.ID("login-password"), login.Password))
	}
	steps = append(steps, chromedp.Click(chromedp.ID("login-submit")))
	runBounded(t, ctx, "open the dashboard and log in", chromedp.Steps(steps...))
	waitPage(t, ctx, "the first overview", `window.corralDash && window.corralDash.updates > 0 && !document.getElementById('main').hidden`)
	return ctx
}

// runBounded runs a on the page within 30 s.
func runBounded[T any](t testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitPage waits (30 s at most) until the JavaScript expression is true.
func waitPage(t testing.TB, ctx context.Context, what, expr string) {
	t.Helper()
	runBounded(t, ctx, "waiting for "+what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(25*time.Second)))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// dashPageJS reads every number the page shows, by its data-* attributes.
const dashPageJS = `(() => {
  const q = (root, sel) => root.querySelector(sel);
  const out = {version: +document.getElementById('cfg-version').textContent, ha: document.getElementById('ha-state').textContent,
    errors: document.getElementById('errors').textContent, services: {}, members: {}, io: {}, meta: {}, events: document.querySelectorAll('#events li').length};
  for (const s of document.querySelectorAll('[data-service]')) {
    const svc = {cluster: s.closest('[data-cluster]').dataset.cluster, rate: +q(s, '.stats [data-field=rate]').dataset.value,
      throughput: +q(s, '.stats [data-field=throughput]').dataset.value, p99: q(s, '[data-field=p99]').textContent,
      p99_value: +(q(s, '[data-field=p99]').dataset.value ?? -1), requests: +(q(s, '.stats [data-field=requests]').dataset.value ?? -1),
      director: q(s, '[data-field=director]').textContent, servers: {},
      fb_seq: +((q(s, '[data-field=feedback]') || {dataset: {}}).dataset.seq ?? -1)};
    for (const r of s.querySelectorAll('tr[data-server]')) {
      svc.servers[r.dataset.server] = {node: r.dataset.node || '', weight: +q(r, '[data-field=weight]').textContent,
        config_weight: +q(r, '[data-field=config_weight]').textContent, active: +q(r, '[data-field=active]').textContent,
        inactive: +q(r, '[data-field=inactive]').textContent, rate: +q(r, '[data-field=rate]').dataset.value,
        health: q(r, '[data-field=health]').dataset.value, drain: (q(r, 'button[data-action]') || {dataset: {}}).dataset.action || '',
        fb_weight: +((q(r, '[data-field=feedback_weight]') || {dataset: {}}).dataset.value ?? -1),
        fb_reason: (q(r, '[data-field=feedback_weight]') || {}).title || ''};
    }
    out.services[s.dataset.service] = svc;
  }
  for (const r of document.querySelectorAll('tr[data-member]')) {
    out.members[r.dataset.member] = {version: +q(r, '[data-field=version]').dataset.value, mismatch: r.dataset.mismatch === 'true',
      error: q(r, '[data-field=error]').textContent, up: q(r, '[data-field=up]').dataset.value === 'true'};
  }
  for (const r of document.querySelectorAll('tr[data-ioserver]')) {
    out.io[r.dataset.ioserver] = {state: q(r, '[data-field=state]').dataset.value, free: +q(r, '[data-field=free]').dataset.value,
      used: +q(r, '[data-field=used]').dataset.value, stale: +q(r, '[data-field=heal]').dataset.stale, healed: +q(r, '[data-field=heal]').dataset.healed};
  }
  for (const r of document.querySelectorAll('tr[data-meta]')) {
    out.meta[r.dataset.meta] = {leader: q(r, '[data-field=role]').dataset.value === 'leader', up: q(r, '[data-field=up]').dataset.value === 'true'};
  }
  return out;
})()`

// dashPage is what dashPageJS returns.
type dashPage struct {
	Version  int64
	HA       string
	Errors   string
	Services map[string]struct {
		Cluster, P99, Director string
		Rate, Throughput       float64
		P99Value               float64 `json:"p99_value"`
		Requests               float64
		FBSeq                  int64 `json:"fb_seq"`
		Servers                map[string]struct {
			Node, Health, Drain    string
			Weight                 float64
			ConfigWeight           float64 `json:"config_weight"`
			Active, Inactive, Rate float64
			FBWeight               float64 `json:"fb_weight"`
			FBReason               string  `json:"fb_reason"`
		}
	}
	Members map[string]struct {
		Version  int64
		Mismatch bool
		Error    string
		Up       bool
	}
	IO map[string]struct {
		State                     string
		Free, Used, Stale, Healed int64
	}
	Meta   map[string]struct{ Leader, Up bool }
	Events int
}

// readPage reads the page's numbers.
func readPage(t testing.TB, ctx context.Context) dashPage {
	t.Helper()
	b := runBounded(t, ctx, "reading the page", chromedp.Evaluate[[]byte](dashPageJS))
	var p dashPage
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("page values: %v\n%s", err, b)
	}
	return p
}

// comparePage checks that the page shows what the API says.
func comparePage(t testing.TB, p dashPage, st dashStatus) {
	t.Helper()
	if p.Version != st.Version || p.HA != st.HA || p.Errors != strings.Join(st.Errors, "\n") {
		t.Errorf("page: version %d ha %q errors %q; API: %d %q %q", p.Version, p.HA, p.Errors, st.Version, st.HA, st.Errors)
	}
	n := 0
	for _, c := range st.Clusters {
		for _, s := range c.Services {
			n++
			ps, ok := p.Services[s.Name]
			if !ok {
				t.Errorf("service %s: not on the page", s.Name)
				continue
			}
			orNone := func(v *float64) float64 {
				if v == nil {
					return -1
				}
				return *v
			}
			if ps.Cluster != c.Name || ps.Rate != s.Rate.CPS || ps.Throughput != s.Rate.InBPS+s.Rate.OutBPS || ps.P99Value != orNone(s.P99) ||
				ps.Requests != orNone(s.ReqPS) || !strings.Contains(ps.Director, s.Director) {
				t.Errorf("service %s: page %+v, API %+v", s.Name, ps, s)
			}
			if want := int64(-1); s.Feedback != nil && ps.FBSeq != int64(s.Feedback.Seq) || s.Feedback == nil && ps.FBSeq != want {
				t.Errorf("service %s: page shows feedback publication %d, API %+v", s.Name, ps.FBSeq, s.Feedback)
			}
			if len(ps.Servers) != len(s.Servers) {
				t.Errorf("service %s: %d servers on the page, %d in the API", s.Name, len(ps.Servers), len(s.Servers))
			}
			for _, x := range s.Servers {
				px := ps.Servers[x.Addr]
				health := map[bool]string{true: "up", false: "down"}[x.Healthy]
				if px.Node != x.Node || int(px.Weight) != x.Weight || int(px.ConfigWeight) != x.ConfigWeight || int64(px.Active) != x.Active ||
					int64(px.Inactive) != x.Inactive || px.Rate != x.Rate.CPS || px.Health != health {
					t.Errorf("service %s server %s: page %+v, API %+v", s.Name, x.Addr, px, x)
				}
				if f := x.Feedback; f != nil && (int(px.FBWeight) != f.Weight || px.FBReason != f.Reason) || f == nil && s.Feedback != nil && px.FBWeight != -1 {
					t.Errorf("service %s server %s: page's feedback %v %q, API %+v", s.Name, x.Addr, px.FBWeight, px.FBReason, f)
				}
			}
		}
	}
	if len(p.Services) != n {
		t.Errorf("%d services on the page, %d in the API", len(p.Services), n)
	}
	if len(p.Members) != len(st.Members) {
		t.Errorf("%d members on the page, %d in the API", len(p.Members), len(st.Members))
	}
	for _, m := range st.Members {
		pm := p.Members[m.Name]
		if pm.Version != m.Version || pm.Mismatch != (m.Version != st.Version) || pm.Error != m.Error || pm.Up != m.Up {
			t.Errorf("member %s: page %+v, API %+v", m.Name, pm, m)
		}
	}
	if len(p.IO) != len(st.Servers) || len(p.Meta) != len(st.Meta) {
		t.Errorf("page: %d I/O servers %d meta; API: %d, %d", len(p.IO), len(p.Meta), len(st.Servers), len(st.Meta))
	}
	for _, s := range st.Servers {
		ps := p.IO[fmt.Sprint(s.ID)]
		if ps.State != s.State || ps.Free != s.Free || ps.Used != s.Total-s.Free || ps.Stale != s.Stale || ps.Healed != s.Healed {
			t.Errorf("I/O server %d: page %+v, API %+v", s.ID, ps, s)
		}
	}
	for _, m := range st.Meta {
		if pm := p.Meta[m.Addr]; pm.Leader != m.Leader || pm.Up != m.Up {
			t.Errorf("meta %s: page %+v, API %+v", m.Addr, pm, m)
		}
	}
}

// TestDashChromium opens the dashboard in headless Chromium, logs in with
// a password, checks the page's numbers against /v1/status, drains a node
// from the page and sees its weight drop to 0. CORRAL_SCREENSHOT=1 also
// writes docs/img/dashboard.png after five minutes of simulated history.
func TestDashChromium(t *testing.T) {
	lab.Need(t, lab.Chromium)
	f := newFakeSource()
	f.metrics = fakeMetrics(t)
	// www's weights come from the station's load feedback.
	f.fb = &director.FeedbackStatus{Source: "agent", Poll: "agent", Seq: 42, Time: time.Now().UTC(), Services: []director.FeedbackService{{Name: "www",
		Nodes: []director.FeedbackNode{
			{Decision: feedback.Decision{Node: "127.0.55.11:8080", Weight: 100, Smoothed: 0.42, Reason: "inside dead band ±0.050 of target 0.800: unchanged"}},
			{Decision: feedback.Decision{Node: "127.0.55.12:8080", Weight: 17, Smoothed: 1.13, Reason: "load did not follow the last move (1.099 -> 1.099): gain 2"}}}}}}
	shot := os.Getenv("CORRAL_SCREENSHOT") == "1"
	_, base := startDash(t, f, func(d *dash) {
		d.tick, d.cacheFor = 100*time.Millisecond, time.Nanosecond
		d.clock = func() time.Time {
			if f.vary.Load() { // screenshots: 3 s of simulated time per overview
				return time.Unix(0, f.clock.Add(int64(3*time.Second)))
			}
			return time.Now()
		}
	})
	ctx := openDashboard(t, base, dashLogin{User: "alice", Password: "wonderland"})
	waitPage(t, ctx, "a third overview (rates need two samples)", `window.corralDash.updates >= 3`)

	comparePage(t, readPage(t, ctx), getStatus(t, base))
	p := readPage(t, ctx)
	if www := p.Services["www"]; www.Servers["127.0.55.11:8080"].Drain != "drain" || www.P99Value != 0.05 || www.P99 != "50.0 ms" || !p.Members["n2"].Mismatch || p.Members["n1"].Mismatch || p.Events < 2 {
		t.Fatalf("before the drain: %+v", p)
	}
	if www, as := p.Services["www"], p.Services["assets"]; www.FBSeq != 42 || www.Servers["127.0.55.12:8080"].FBWeight != 17 ||
		!strings.Contains(www.Servers["127.0.55.12:8080"].FBReason, "gain 2") || as.FBSeq != -1 {
		t.Fatalf("feedback on the page: www %+v, assets %+v", www, as)
	}

	// Drain n1 from the page: the pool shows it at weight 0.
	runBounded(t, ctx, "clicking drain", chromedp.Click(chromedp.CSS(`[data-service="www"] button[data-action="drain"][data-node="n1"]`)))
	waitPage(t, ctx, "n1 at weight 0", `(() => { const r = document.querySelector('[data-service="www"] tr[data-node="n1"]');
		return r && r.querySelector('[data-field=weight]').textContent === '0' && r.querySelector('button[data-action=undrain]') !== null; })()`)
	f.mu.Lock()
	drains := fmt.Sprint(f.drains)
	f.mu.Unlock()
	if drains != "[n1 true alice]" {
		t.Fatalf("setDrain calls: %s", drains)
	}
	st := getStatus(t, base)
	comparePage(t, readPage(t, ctx), st)
	if w := st.Clusters[0].Services[0].Servers[0]; w.Node != "n1" || w.Weight != 0 || !w.Drained {
		t.Fatalf("API after the drain: %+v", w)
	}
	waitPage(t, ctx, "the drain event", `[...document.querySelectorAll('#events li')].some(li => li.dataset.event === 'drain')`)

	if !shot {
		return
	}
	f.startVarying()
	// The charts start once requests/s has two varying samples behind it:
	// the static ones before would show as a step.
	waitPage(t, ctx, "requests counted", `+document.querySelector('[data-service="www"] .stats [data-field=requests]').dataset.value > 100`)
	runBounded(t, ctx, "clearing the charts", chromedp.Evaluate[chromedp.Void](`window.corralDash.history.clear()`))
	waitPage(t, ctx, "five minutes of simulated history", `+document.querySelector('[data-service="www"] svg[data-field=chart]').dataset.samples >= 95`)
	png := runBounded(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	out := filepath.Join("..", "..", "docs", "img", "dashboard.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", out, len(png))
}

// A read-only user sees the page but the station refuses a drain; the
// page says so.
func TestDashChromiumReadOnly(t *testing.T) {
	lab.Need(t, lab.Chromium)
	f := newFakeSource()
	_, base := startDash(t, f, func(d *dash) { d.tick = 100 * time.Millisecond })
	ctx := openDashboard(t, base, dashLogin{Token: dashReadToken})
	runBounded(t, ctx, "clicking drain", chromedp.Click(chromedp.CSS(`button[data-action="drain"][data-node="n2"]`)))
	waitPage(t, ctx, "the refusal", `document.getElementById('action-error').textContent.includes('admin only')`)
	f.mu.Lock()
	drains := len(f.drains)
	f.mu.Unlock()
	if drains != 0 {
		t.Fatal("a read-only user drained a node")
	}
	// A bad token goes back to the login form with the reason.
	runBounded(t, ctx, "log out", chromedp.Click(chromedp.ID("logout")))
	runBounded(t, ctx, "bad token", chromedp.Steps(chromedp.SetValue(chromedp.ID("login-token"), "nonsense"), chromedp.Click(chromedp.ID("login-submit"))))
	waitPage(t, ctx, "the login error", `document.getElementById('login-error').textContent.includes('token refused') && !document.getElementById('login').hidden`)
	// The form says where a login is: corral up's admin password file,
	// the bootstrap token, how to make a user and a token.
	waitPage(t, ctx, "the login help", `(() => { const h = document.getElementById('login-help');
		return h && h.offsetParent !== null && ['admin.password', 'admin.token', 'corral mgmt user add', 'corral mgmt login'].every(s => h.textContent.includes(s)); })()`)
}

// Strings members and errors bring (names, messages) are shown as text,
// never parsed as HTML.
func TestDashChromiumEscapes(t *testing.T) {
	lab.Need(t, lab.Chromium)
	f := newFakeSource()
	_, base := startDash(t, f, func(d *dash) { d.tick, d.cacheFor = 100*time.Millisecond, time.Nanosecond })
	ctx := openDashboard(t, base, dashLogin{Token: dashReadToken})
	payload := `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script><b id=injected>x</b>`
	f.publish(api.Event{Time: time.Now(), Kind: "apply-error", Member: payload, Msg: payload})
	f.mu.Lock()
	f.fail = errors.New(payload)
	f.mu.Unlock()
	waitPage(t, ctx, "the payload shown as text", `document.getElementById('errors').textContent.includes('<img src=x') &&
		[...document.querySelectorAll('#events li')].some(li => li.textContent.includes('<script>window.pwned=2</script>'))`)
	ok := runBounded(t, ctx, "looking for injected nodes", chromedp.Evaluate[bool](
		`window.pwned === undefined && document.getElementById('injected') === null && document.querySelectorAll('#main img, #main script').length === 0`))
	if !ok {
		t.Fatal("a member-reported string was parsed as HTML")
	}
}
