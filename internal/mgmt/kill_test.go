package mgmt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// TestKill9Child is the station process TestKill9Restart kills; it does
// nothing unless that test started it.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv("CORRAL_MGMT_KILL_CHILD")
	if dir == "" {
		t.Skip("child of TestKill9Restart only")
	}
	s, err := New(stationOpts("127.0.52.41", dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s.Run(ctx, func(string) { os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600) })
}

func TestKill9Restart(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CORRAL_MGMT_KILL_CHILD="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if i == 300 {
			t.Fatal("child station not ready within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	tokb, _ := os.ReadFile(filepath.Join(dir, "admin.token"))
	ca, _ := os.ReadFile(filepath.Join(dir, "tls", "ca.pem"))
	c, err := api.NewClient([]string{"https://127.0.52.41:7600"}, strings.TrimSpace(string(tokb)), ca)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for v := int64(0); v < 5; v++ {
		mustApply(t, c, v, "v: "+itoa(v+1))
	}
	var tok api.Token
	if err := c.Do(ctx, "POST", api.RouteTokens, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour}, &tok); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged change survives kill -9.
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed = true

	ts := startStation(t, stationOpts("127.0.52.41", dir))
	var v api.Version
	admin := ts.client(t, ts.admin)
	if err := admin.Do(ctx, "GET", api.RouteConfig, nil, &v); err != nil || v.Version != 5 || v.YAML != "v: 5\n" {
		t.Fatalf("after kill -9: %+v %v", v, err)
	}
	var jr api.JoinReply
	if err := ts.client(t, tok.Secret).Do(ctx, "POST", api.RouteJoin, api.JoinRequest{Role: "node", Name: "n1"}, &jr); err != nil {
		t.Fatalf("token made before kill -9: %v", err)
	}
}
