package launch_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/launch/managed"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// TestJoinEntersPool (issue 15, automatic join): a new machine started
// with nothing but a single-use node token for cluster web fetches its
// credentials, mounts the content, is added to the configuration, passes
// the director's health check and serves requests through the VIP; the
// token is then used up.
func TestJoinEntersPool(t *testing.T) {
	m := startManaged(t, 1)
	m.waitApplied(t, 1, m.members(), 20*time.Second)
	var tok api.Token
	if err := m.call(http.MethodPost, api.RouteTokens, api.TokenRequest{Role: api.RoleNode, TTL: time.Hour, SingleUse: true, Cluster: "web"}, &tok); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(m.data, "mgmt", "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hash, err := managed.CAHash(ca)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "node.token")
	if err := os.WriteFile(tokFile, []byte(managed.JoinToken(tok, hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := stationNet + ".29:8080"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := launch.Start(ctx, "node9", m.bin, filepath.Join(dir, "node9.log"), "node", "--listen", addr,
		"--join", m.stationURL(), "--token-file", tokFile, "--name", "node9", "--state", filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })

	c, _ := m.current(t)
	i := slices.IndexFunc(c.Nodes, func(n clustercfg.Node) bool { return n.Name == "node9" })
	if i < 0 {
		t.Fatalf("node9 not in the configuration after its join: %+v", c.Nodes)
	}
	if n := c.Nodes[i]; n.Address != addr || n.Cluster != "web" || n.DefaultDomain != "www.example.test" {
		t.Fatalf("node9 configured as %+v", n)
	}
	waitFor(t, "node9 in the director's pool", 20*time.Second, func() error {
		w, err := m.directorWeight("www", addr)
		if err == nil && w != 1 {
			err = errors.New("weight not 1")
		}
		return err
	})
	// Health checks bring it in (1 s interval): then every request through
	// the VIP is answered, node9's share included.
	waitFor(t, "node9 serving through the VIP", 20*time.Second, func() error {
		res, err := http.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return errors.New(res.Status)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // rise: the director's check passes
	ok, errs := loop(m.vip(), 60, 6*time.Second)
	if len(errs) > 0 {
		t.Fatalf("%d of %d requests through the VIP failed with node9 in the pool: %v", len(errs), ok+len(errs), errs[:min(len(errs), 3)])
	}
	var toks []api.Token
	if err := m.call(http.MethodGet, api.RouteTokens, nil, &toks); err != nil {
		t.Fatal(err)
	}
	if j := slices.IndexFunc(toks, func(x api.Token) bool { return x.ID == tok.ID }); j < 0 || !toks[j].Used {
		t.Fatalf("the single-use token is not used up: %+v", toks)
	}
}
