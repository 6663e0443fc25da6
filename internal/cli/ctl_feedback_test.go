package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/node"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// serveOn serves h on addr until the test ends; it skips if addr is taken.
func serveOn(t *testing.T, addr string, h http.Handler) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		lab.Need(t, lab.Err("listen on "+addr, err))
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// TestCtlFeedback runs a real director with a feedback block (agent
// source) over two real node admin handlers, and the real `corral ctl
// feedback`: the table and --json. Loopback 127.0.87.31-.33 (this
// helper's range); .33 has no /load.
func TestCtlFeedback(t *testing.T) {
	bin := pfstest.Binary(t)
	backs := []string{"127.0.87.31:18080", "127.0.87.32:18080", "127.0.87.33:18080"}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "a") })
	for i, b := range backs {
		serveOn(t, b, ok)
		if i < 2 {
			n := node.New(node.Config{Meta: "127.0.87.99:1", LoadInterface: "lo"})
			t.Cleanup(n.Close)
			serveOn(t, fmt.Sprintf("127.0.87.3%d:19088", i+1), n.AdminMux())
		}
	}
	confDir := t.TempDir()
	admin := loopbackAddr(t)
	conf := filepath.Join(confDir, "director.conf")
	text := fmt.Sprintf("admin %s\nfeedback {\n source agent\n agent-port 19088\n interval 200ms\n timeout 150ms\n bandwidth 1gbit\n cpu cpuraw\n}\n"+
		"service www {\n  vip %s\n  scheduler wlc\n  weights feedback\n  check none\n  server %s\n  server %s\n  server %s\n}\n", admin, loopbackAddr(t), backs[0], backs[1], backs[2])
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := launch.Start(context.Background(), "director", bin, filepath.Join(confDir, "director.log"), "director", "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	empty := t.TempDir()
	var st director.FeedbackStatus
	for i := 0; i < 100; i++ { // 10 s
		out, _, ok := ctlRun(t, bin, empty, nil, "ctl", "--admin", admin, "feedback", "--json")
		st = director.FeedbackStatus{}
		if ok && json.Unmarshal([]byte(out), &st) == nil && len(st.Services) == 1 && len(st.Services[0].Nodes) == 3 &&
			st.Services[0].Nodes[0].Terms != nil && st.Services[0].Nodes[2].Weight == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(st.Services) != 1 || st.Source != "agent" || st.Services[0].Nodes[0].Terms == nil || st.Services[0].Nodes[2].Weight != 1 {
		t.Fatalf("ctl feedback --json never showed terms and a decayed silent node: %+v", st)
	}
	out, stderr, okRun := ctlRun(t, bin, empty, nil, "ctl", "--admin", admin, "feedback")
	if !okRun {
		t.Fatalf("ctl feedback: %s", stderr)
	}
	for _, want := range []string{"source agent, every 200ms", "service www: polled", "eth%", "cpu%", "total%", backs[0], backs[2] + ": no answer"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl feedback lacks %q:\n%s", want, out)
		}
	}
}
