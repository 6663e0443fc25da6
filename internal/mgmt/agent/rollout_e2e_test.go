package agent

// The rolling upgrade end to end, in processes: a real station (package
// mgmt, in this process), two members that are this test binary running
// the real agent (Join + Run, child mode below) under a supervisor played
// by the test, a deliberately broken binary (a script that exits 1) and a
// good one. The broken rollout must roll node1 back and leave node2
// untouched; the good one must put the new build on both, installed.

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

const (
	envE2EStation = "UPTEST_E2E_STATION"
	envE2EToken   = "UPTEST_E2E_TOKEN"
	envE2EName    = "UPTEST_E2E_NAME"
	envE2EState   = "UPTEST_E2E_STATE"
	envE2ECA      = "UPTEST_E2E_CA"
)

func init() {
	// Child mode for the end-to-end test (TestMain handles the other).
	if os.Getenv(envE2EStation) != "" {
		os.Exit(e2eChild())
	}
}

// e2eChild is a member running the real agent, healthy, applying nothing.
func e2eChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := os.Getenv(envE2EName)
	opt := Options{
		Stations: []string{os.Getenv(envE2EStation)},
		Token:    os.Getenv(envE2EToken),
		State:    os.Getenv(envE2EState),
		CAFile:   os.Getenv(envE2ECA),
		Role:     api.RoleIOD, // no drain: the test has no director
		Name:     name,
		Addr:     name + ":7410",
		Apply: func(context.Context, *clustercfg.Config, int64, []string) error {
			return nil
		},
	}
	a, _, err := Join(ctx, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e child: join:", err)
		return 2
	}
	if err := a.Run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "e2e child: run:", err)
		return 2
	}
	return 0
}

// e2eMember is one supervised member: restarted from its installed
// binary whenever it exits (as corral up does), until the test ends.
type e2eMember struct {
	name, inst, state string
	mu                sync.Mutex
	exits             int
}

func TestRolloutEndToEndBrokenThenGood(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a station and member processes")
	}
	dir := t.TempDir()
	st, err := mgmt.New(mgmt.Options{Data: filepath.Join(dir, "station"), Listen: "127.0.56.1:27600",
		EtcdClient: "127.0.56.1:27601", EtcdPeer: "127.0.56.1:27602"})
	if err != nil {
		t.Fatalf("station: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var runErr error
	stopped := make(chan struct{})
	go func() { runErr = st.Run(ctx, func(addr string) { ready <- addr }); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped; st.Close() })
	var addr string
	select {
	case addr = <-ready:
	case <-stopped:
		t.Fatalf("station stopped before it was ready: %v", runErr)
	case <-time.After(60 * time.Second):
		t.Fatal("station not ready within 60 s")
	}
	url := "https://" + addr
	caFile := filepath.Join(dir, "station", "tls", "ca.pem")
	adm, err := os.ReadFile(filepath.Join(dir, "station", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.NewClientCAFile([]string{url}, strings.TrimSpace(string(adm)), caFile)
	if err != nil {
		t.Fatal(err)
	}
	var tok api.Token
	if err := c.Do(ctx, "POST", api.RouteTokens, api.TokenRequest{Role: api.RoleIOD, TTL: 10 * time.Minute, MultiUse: true}, &tok); err != nil {
		t.Fatal(err)
	}
	token := tok.Secret
	if strings.Count(token, ".") < 2 {
		token = tok.ID + "." + tok.Secret + "." + e2eCAHash(t, caFile)
	}

	self, _ := os.Executable()
	var members []*e2eMember
	for _, name := range []string{"node1", "node2"} {
		m := &e2eMember{name: name, state: filepath.Join(dir, name, "state")}
		os.MkdirAll(filepath.Join(dir, name, "bin"), 0o755)
		m.inst = filepath.Join(dir, name, "bin", "corral")
		if err := upCopy(self, m.inst, 0o755); err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
		e2eSupervise(t, ctx, m, url, token, caFile, filepath.Join(dir, name+".log"))
	}
	oldSHA, _ := api.FileSHA256(members[0].inst)
	waitMembers(t, c, 60*time.Second, func(ms map[string]api.MemberStatus) bool {
		return ms["node1"].Up && ms["node2"].Up && ms["node1"].Build == oldSHA && ms["node2"].Build == oldSHA
	})

	// A deliberately broken binary: node1 rolls back, node2 is untouched.
	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte("#!/bin/sh\necho broken build >&2\nexit 1\n"), 0o755)
	ro := e2eRollout(t, c, broken, 5*time.Second)
	if ro.State != "failed" || len(ro.Steps) != 2 || ro.Steps[0].State != "rolled-back" || ro.Steps[1].State != "waiting" {
		t.Fatalf("broken rollout: %+v", ro)
	}
	if members[0].exitCount() == 0 {
		t.Error("node1 never ran the broken binary")
	}
	waitMembers(t, c, 30*time.Second, func(ms map[string]api.MemberStatus) bool {
		return ms["node1"].Up && ms["node1"].Healthy && ms["node1"].Build == oldSHA && ms["node2"].Build == oldSHA
	})
	for _, m := range members {
		if got, _ := api.FileSHA256(m.inst); got != oldSHA {
			t.Errorf("%s: installed binary changed by the broken rollout", m.name)
		}
	}
	if members[1].exitCount() != 0 {
		t.Errorf("node2 restarted during the broken rollout")
	}

	// A good binary: both members run it, installed, same processes.
	good := filepath.Join(dir, "good")
	upCopy(self, good, 0o755)
	f, _ := os.OpenFile(good, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\ncorral e2e good build\n")
	f.Close()
	goodSHA, _ := api.FileSHA256(good)
	ro = e2eRollout(t, c, good, 20*time.Second)
	if ro.State != "done" {
		t.Fatalf("good rollout: %+v", ro)
	}
	end := time.Now().Add(20 * time.Second)
	for _, m := range members {
		for time.Now().Before(end) {
			if got, _ := api.FileSHA256(m.inst); got == goodSHA {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got, _ := api.FileSHA256(m.inst); got != goodSHA {
			t.Errorf("%s: installed binary %s, want the good build", m.name, upShort(got))
		}
		if got, _ := api.FileSHA256(m.inst + ".prev"); got != oldSHA {
			t.Errorf("%s: .prev is not the old build", m.name)
		}
	}
}

func (m *e2eMember) exitCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exits
}

// e2eSupervise runs m from its installed binary and restarts it when it
// exits (at most 20 times), until ctx ends.
func e2eSupervise(t *testing.T, ctx context.Context, m *e2eMember, url, token, caFile, logFile string) {
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20 && ctx.Err() == nil; i++ {
			cmd := exec.CommandContext(ctx, m.inst)
			cmd.Env = append(os.Environ(), envE2EStation+"="+url, envE2EToken+"="+token, envE2EName+"="+m.name,
				envE2EState+"="+m.state, envE2ECA+"="+caFile)
			cmd.Stdout, cmd.Stderr = log, log
			if err := cmd.Run(); ctx.Err() != nil {
				return
			} else {
				fmt.Fprintf(log, "supervisor: %s exited: %v; restarting\n", m.name, err)
			}
			m.mu.Lock()
			m.exits++
			m.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("%s log:\n%s", m.name, b)
		}
	})
}

// e2eRollout uploads bin, rolls it out to node1 then node2 and waits for
// the end (bounded).
func e2eRollout(t *testing.T, c *api.Client, bin string, check time.Duration) api.Rollout {
	t.Helper()
	ctx := context.Background()
	sha, err := api.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DoFile(ctx, "PUT", api.RouteBinary+sha, bin, nil); err != nil {
		t.Fatal(err)
	}
	var ro api.Rollout
	if err := c.Do(ctx, "POST", api.RouteRollout, api.RolloutRequest{SHA256: sha, Members: []string{"node1", "node2"}, Check: check}, &ro); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(2*(3*check+time.Minute) + time.Minute)
	for ro.State == "running" && time.Now().Before(end) {
		time.Sleep(200 * time.Millisecond)
		if err := c.Do(ctx, "GET", api.RouteRollout, nil, &ro); err != nil {
			t.Fatal(err)
		}
	}
	return ro
}

func waitMembers(t *testing.T, c *api.Client, d time.Duration, ok func(map[string]api.MemberStatus) bool) {
	t.Helper()
	end := time.Now().Add(d)
	var last []api.MemberStatus
	for time.Now().Before(end) {
		last = nil
		if err := c.Do(context.Background(), "GET", api.RouteMembers, nil, &last); err == nil {
			ms := map[string]api.MemberStatus{}
			for _, m := range last {
				ms[m.Name] = m
			}
			if ok(ms) {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("members not as wanted within %v: %+v", d, last)
}

// e2eCAHash is the token's CAHASH: the first 32 hex digits of the sha256
// of the CA certificate's DER.
func e2eCAHash(t *testing.T, caFile string) string {
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal(errors.New("no PEM in " + caFile))
	}
	if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(blk.Bytes)
	return hex.EncodeToString(sum[:])[:32]
}
