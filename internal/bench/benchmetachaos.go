package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
)

// membersJSON runs `corral fs meta members --json` against the cluster.
func membersJSON(ctx context.Context, bin, meta string, env []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "fs", "--meta", meta, "meta", "members", "--json")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("corral fs meta members --json: %v", err)
	}
	if !json.Valid(out) {
		return nil, fmt.Errorf("corral fs meta members --json: not JSON: %.80q", out)
	}
	return out, nil
}

// leaderID finds the leader's member ID in the output of `corral fs meta
// members --json`, whose exact shape is the members command's: a number
// under a key "leader" (as replog.Status has it), or a member object whose
// "leader" is true or whose "role" or "state" is "leader", with its "id".
// 0: no leader found.
func leaderID(b []byte) uint64 {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return 0
	}
	var find func(v any) uint64
	find = func(v any) uint64 {
		switch x := v.(type) {
		case map[string]any:
			var id uint64
			isLeader := false
			for k, f := range x {
				switch strings.ToLower(k) {
				case "leader", "leader_id", "leaderid":
					if n, ok := f.(float64); ok && n > 0 {
						return uint64(n)
					}
					if t, ok := f.(bool); ok && t {
						isLeader = true
					}
				case "role", "state":
					if s, ok := f.(string); ok && strings.EqualFold(s, "leader") {
						isLeader = true
					}
				case "id":
					if n, ok := f.(float64); ok {
						id = uint64(n)
					}
				}
			}
			if isLeader && id > 0 {
				return id
			}
			for _, f := range x {
				if id := find(f); id > 0 {
					return id
				}
			}
		case []any:
			for _, f := range x {
				if id := find(f); id > 0 {
					return id
				}
			}
		}
		return 0
	}
	return find(v)
}

// metaChaos kills the metadata leader (SIGKILL) every cfg.ChaosEvery,
// cfg.ChaosKills times, while one client creates files in a loop, and
// records per kill the time from the kill to the end of the first create
// started after it that succeeded. The killed member is restarted once
// creates resume, so the next kill leaves a quorum.
func metaChaos(ctx context.Context, cfg MetaConfig, c *metaCluster, res *MetaResult, logf func(string, ...any)) error {
	if _, err := membersJSON(ctx, cfg.Bin, c.Meta, c.Env); err != nil {
		res.Notes = append(res.Notes, "chaos skipped: "+err.Error())
		logf("chaos: skipped: %v\n", err)
		return nil
	}
	for _, e := range c.Env {
		k, v, _ := strings.Cut(e, "=")
		os.Setenv(k, v)
	}
	cl := client.New(c.Meta)
	defer cl.Close()
	if err := cl.MkdirAll(ctx, "/chaos", 0o755); err != nil {
		return fmt.Errorf("chaos: mkdir /chaos: %w", err)
	}
	dir, err := cl.Stat(ctx, "/chaos")
	if err != nil {
		return err
	}
	type op struct{ start, end time.Time }
	var mu sync.Mutex
	var oks []op
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; wctx.Err() == nil; i++ {
			start := time.Now()
			octx, cancel := context.WithTimeout(wctx, 5*time.Second)
			_, _, err := cl.Create(octx, dir.Ino, fmt.Sprintf("c%07d", i), 0o644, client.CreateOpts{})
			cancel()
			if err == nil {
				mu.Lock()
				oks = append(oks, op{start, time.Now()})
				mu.Unlock()
			} else {
				time.Sleep(5 * time.Millisecond) // a failing member answers at once
			}
		}
	}()
	defer func() { stop(); wg.Wait() }()
	every := cfg.ChaosEvery
	for k := 0; k < max(cfg.ChaosKills, 1); k++ {
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return ctx.Err()
		}
		out, err := membersJSON(ctx, cfg.Bin, c.Meta, c.Env)
		if err != nil {
			return fmt.Errorf("chaos kill %d: %w", k+1, err)
		}
		id := leaderID(out)
		if id < 1 || int(id) > len(c.members) {
			return fmt.Errorf("chaos kill %d: no leader among members 1..%d in %.200s", k+1, len(c.members), out)
		}
		victim := c.members[id-1]
		killed := time.Now()
		victim.Kill()
		var resumed time.Time
		for end := killed.Add(2 * time.Minute); resumed.IsZero() && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			for _, o := range oks {
				if !o.start.Before(killed) {
					resumed = o.end
					break
				}
			}
			mu.Unlock()
		}
		kill := ChaosKill{Killed: fmt.Sprintf("member %d (%s)", id, c.addrs[id-1]), ResumeMs: -1}
		if !resumed.IsZero() {
			kill.ResumeMs = float64(resumed.Sub(killed).Microseconds()) / 1000
		}
		res.Chaos = append(res.Chaos, kill)
		logf("chaos: killed %s: creates resumed after %.0f ms\n", kill.Killed, kill.ResumeMs)
		p, err := c.startMember(ctx, int(id-1))
		if err != nil {
			return fmt.Errorf("chaos: restart member %d: %w", id, err)
		}
		c.members[id-1] = p
		mu.Lock()
		oks = oks[:0]
		mu.Unlock()
		if kill.ResumeMs < 0 {
			return fmt.Errorf("chaos: creates did not resume within 2 minutes of killing %s", kill.Killed)
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("chaos: the leader (from corral fs meta members --json) killed with SIGKILL every %v while one client creates files in a loop; resume = kill to the end of the first create started after it that succeeded; the member is restarted after", every))
	return nil
}
