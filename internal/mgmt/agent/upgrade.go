package agent

// A member's side of a rolling upgrade (docs/mgmt.md "Rolling upgrade").
//
// On an order the agent fetches the binary (member credential, sha256
// checked) into STATE/bin/SHA and replaces its process with it
// (syscall.Exec: same PID, so the supervisor — corral up, systemd — sees
// one process). The new binary runs "on trial": it reports its build and,
// once healthy while the order still stands, installs itself at the path
// the supervisor runs (the old one kept as PATH.prev). Until then nothing
// on disk has changed, so a binary that crashes or never starts is
// replaced by the supervisor with the old one: the rollback is complete by
// construction. A trial not confirmed in time, or a Revert order, execs
// the old binary again.
//
// The state lives in this file, process-wide (an exec replaces the whole
// process anyway), not in the Agent struct.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
)

// The environment a trial binary is started with.
const (
	EnvRollout      = "CORRAL_ROLLOUT"       // sha256 of the binary on trial
	EnvRollback     = "CORRAL_ROLLBACK"      // the binary to exec to go back
	EnvRolloutPath  = "CORRAL_ROLLOUT_PATH"  // the installed binary the supervisor runs
	EnvRolloutID    = "CORRAL_ROLLOUT_ID"    // the rollout's ID
	EnvRolloutCheck = "CORRAL_ROLLOUT_CHECK" // how long the trial has to be confirmed (Go duration)
)

const (
	// confirmHealthy is how long the trial must stay healthy before it
	// installs itself: long enough for the agent's 1 s report to carry it.
	confirmHealthy = 1500 * time.Millisecond
	// trialSlack extends the trial's own deadline past the station's
	// check, so a station that accepted the build near the end of its
	// check does not see the member revert on its own.
	trialSlack      = 3 * time.Second
	defaultTrial    = 30 * time.Second
	upMaxFetch      = 512 << 20
	trialMarkerFile = "trial.json"
)

// execFn replaces the process (a variable so tests in one process can
// see what would be run).
var execFn = syscall.Exec

// upgrader is the process's rolling-upgrade state.
type upgrader struct {
	mu         sync.Mutex
	order      *api.BinaryOrder // the latest order
	build      string           // sha256 of the running binary, computed once
	trial      string           // sha256 on trial in this process ("": none)
	id         string           // the trial's rollout
	path       string           // the installed binary (CORRAL_ROLLOUT_PATH)
	rollback   string           // the binary to go back to (CORRAL_ROLLBACK)
	check      time.Duration
	timer      *time.Timer
	confirming bool
	confirmed  bool
	installed  bool // this process installed itself (PATH.prev is the old one)
	fetching   bool
	log        *slog.Logger
}

var upg = newUpgrader()

func newUpgrader() *upgrader {
	u := &upgrader{log: slog.Default()}
	u.path = os.Getenv(EnvRolloutPath)
	if sha := os.Getenv(EnvRollout); sha != "" {
		u.trial, u.id, u.rollback = sha, os.Getenv(EnvRolloutID), os.Getenv(EnvRollback)
		u.check = defaultTrial
		if d, err := time.ParseDuration(os.Getenv(EnvRolloutCheck)); err == nil && d > 0 {
			u.check = d
		}
		// Started before anything else: a trial whose agent never gets
		// to the station still goes back by itself.
		u.timer = time.AfterFunc(u.check+trialSlack, func() {
			u.revert(fmt.Sprintf("trial of %s not confirmed within %v", upShort(sha), u.check+trialSlack))
		})
	}
	// Programs this process starts (exec health checks, corral
	// commands) must not take themselves for a trial.
	for _, v := range []string{EnvRollout, EnvRollback, EnvRolloutPath, EnvRolloutID, EnvRolloutCheck} {
		os.Unsetenv(v)
	}
	return u
}

// handleBinary carries out a rolling-upgrade order: fetch the binary,
// check its SHA256, run it in trial, or revert (Revert).
func (a *Agent) handleBinary(ctx context.Context, o *api.BinaryOrder) error {
	return upg.handle(ctx, a, o)
}

func (u *upgrader) handle(ctx context.Context, a *Agent, o *api.BinaryOrder) error {
	u.mu.Lock()
	u.order = o
	if o == nil {
		u.mu.Unlock()
		return nil // an unconfirmed trial goes back when its time is up
	}
	if o.Revert {
		back := u.trial == o.SHA256 && u.trial != ""
		u.mu.Unlock()
		if back {
			u.revert("the station ordered the rollback of rollout " + o.Rollout)
		}
		return nil // else the old binary runs already
	}
	if !api.IsSHA256(o.SHA256) {
		u.mu.Unlock()
		return fmt.Errorf("rollout %s: order names %q, not a sha256", o.Rollout, o.SHA256)
	}
	if u.build == "" {
		b, err := api.FileSHA256(upRunning())
		if err != nil {
			u.mu.Unlock()
			return fmt.Errorf("rollout: hashing the running binary: %w", err)
		}
		u.build = b
	}
	if u.build == o.SHA256 {
		if u.trial == o.SHA256 && !u.confirmed && !u.confirming {
			u.confirming = true
			go u.confirm(a.opt.Health, o.SHA256, o.Rollout)
		}
		u.mu.Unlock()
		return nil
	}
	if u.fetching {
		u.mu.Unlock()
		return nil
	}
	state := a.opt.State
	if upTried(state, o) {
		u.mu.Unlock()
		return fmt.Errorf("rollout %s: the trial of %s failed on this member; staying on %s", o.Rollout, upShort(o.SHA256), upShort(u.build))
	}
	u.fetching = true
	u.mu.Unlock()

	bin, err := upFetch(ctx, a, state, o.SHA256)
	u.mu.Lock()
	u.fetching = false
	latest := u.order
	u.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rollout %s: %w", o.Rollout, err)
	}
	if latest == nil || *latest != *o {
		// The order changed meanwhile; the agent core hands over only
		// changes, so the newest is carried out here.
		if latest != nil && !latest.Revert && ctx.Err() == nil {
			return u.handle(ctx, a, latest)
		}
		return nil
	}
	return u.start(state, bin, o)
}

// start marks the trial (so a crash of the new binary is not retried by
// the old one) and execs bin.
func (u *upgrader) start(state, bin string, o *api.BinaryOrder) error {
	self := upRunning()
	u.mu.Lock()
	path := u.path
	u.mu.Unlock()
	if path == "" {
		path = self // the first trial: what the supervisor runs is us
	}
	check := o.Check
	if check <= 0 {
		check = defaultTrial
	}
	if err := upMarkTrial(state, o); err != nil {
		return fmt.Errorf("rollout %s: %w", o.Rollout, err)
	}
	env := append(upCleanEnv(os.Environ()),
		EnvRollout+"="+o.SHA256, EnvRollback+"="+self, EnvRolloutPath+"="+path,
		EnvRolloutID+"="+o.Rollout, EnvRolloutCheck+"="+check.String())
	u.log.Info("rollout: running the new binary on trial", "rollout", o.Rollout, "sha256", upShort(o.SHA256), "binary", bin)
	err := execFn(bin, os.Args, env)
	// Still here: the exec failed, and we keep running the old binary.
	os.Remove(filepath.Join(state, "bin", trialMarkerFile))
	return fmt.Errorf("rollout %s: exec %s: %w", o.Rollout, bin, err)
}

// confirm waits until the trial has been healthy for confirmHealthy with
// the order still standing, then installs it.
func (u *upgrader) confirm(health func() error, sha, id string) {
	defer func() { u.mu.Lock(); u.confirming = false; u.mu.Unlock() }()
	var since time.Time
	end := time.Now().Add(u.check + trialSlack)
	for time.Now().Before(end) {
		u.mu.Lock()
		o := u.order
		u.mu.Unlock()
		if o == nil || o.Revert || o.SHA256 != sha {
			return // not ours any more: the timer or the revert decides
		}
		if health == nil || health() == nil {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= confirmHealthy {
				u.install(sha, id)
				return
			}
		} else {
			since = time.Time{}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// install puts the trial binary where the supervisor runs it (atomic
// rename; the old one kept as PATH.prev) and ends the trial.
func (u *upgrader) install(sha, id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.confirmed {
		return
	}
	if u.timer != nil && !u.timer.Stop() {
		return // the trial's time ran out: it is reverting
	}
	u.confirmed = true
	path := u.path
	if err := upInstall(upRunning(), path); err != nil {
		// It keeps running; a restart would run the old binary again.
		u.log.Error("rollout: the new binary runs but could not be installed", "rollout", id, "path", path, "err", err)
		return
	}
	u.installed = true
	u.log.Info("rollout: new binary confirmed and installed", "rollout", id, "sha256", upShort(sha), "path", path)
}

// revert execs the binary run before the trial (after putting PATH.prev
// back if this trial had installed itself). If that fails, the process
// exits so the supervisor starts the installed (old) binary.
func (u *upgrader) revert(why string) {
	u.mu.Lock()
	if u.timer != nil {
		u.timer.Stop()
	}
	installed, path, back := u.installed, u.path, u.rollback
	u.mu.Unlock()
	if installed && path != "" {
		if err := os.Rename(path+".prev", path); err != nil {
			u.log.Error("rollout: putting the old binary back", "path", path, "err", err)
		}
	}
	u.log.Warn("rollout: going back to the old binary", "why", why, "binary", back)
	if back != "" {
		env := upCleanEnv(os.Environ())
		if path != "" {
			// Kept, so a later rollout installs where the supervisor runs.
			env = append(env, EnvRolloutPath+"="+path)
		}
		err := execFn(back, os.Args, env)
		u.log.Error("rollout: exec of the old binary failed; exiting so the supervisor restarts it", "binary", back, "err", err)
	}
	os.Exit(1)
}

// upInstall puts a copy of src at path (atomically: a crash leaves the
// old binary or the new one, never a torn one), keeping the old one as
// path.prev.
func upInstall(src, path string) error {
	if path == "" {
		return errors.New("no " + EnvRolloutPath)
	}
	prev := path + ".prev"
	os.Remove(prev)
	if err := os.Link(path, prev); err != nil {
		if err := upCopy(path, prev, 0o755); err != nil {
			return fmt.Errorf("keeping the old binary as %s: %w", prev, err)
		}
	}
	return upCopy(src, path, 0o755)
}

// upCopy copies src to dst through safefile (temporary file, fsync,
// rename, fsync of the directory).
func upCopy(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	_, err = safefile.Copy(dst, mode, in)
	return err
}

// upFetch downloads the binary into STATE/bin/SHA (0755), checking
// its sha256 on the way; one already there and whole is reused.
func upFetch(ctx context.Context, a *Agent, state, sha string) (string, error) {
	if state == "" {
		return "", errors.New("no state directory for the binary (--state)")
	}
	dir := filepath.Join(state, "bin")
	if err := safefile.MkdirAll(dir); err != nil {
		return "", err
	}
	final := filepath.Join(dir, sha)
	if got, err := api.FileSHA256(final); err == nil && got == sha {
		return final, nil
	}
	c, err := a.upgradeClient()
	if err != nil {
		return "", err
	}
	f, err := safefile.Create(final, 0o755)
	if err != nil {
		return "", err
	}
	defer f.Abort() // nothing once committed
	h := sha256.New()
	w := &upLimitWriter{w: io.MultiWriter(f, h), n: upMaxFetch}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	err = c.DoRaw(ctx, "GET", api.RouteBinary+sha, "", nil, w)
	if err != nil {
		return "", fmt.Errorf("fetching binary %s: %w", upShort(sha), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		return "", fmt.Errorf("binary from the station has sha256 %s, not %s", upShort(got), upShort(sha))
	}
	if err := f.Commit(); err != nil {
		return "", err
	}
	return final, nil
}

type upLimitWriter struct {
	w io.Writer
	n int64
}

func (l *upLimitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, fmt.Errorf("binary larger than %d bytes", int64(upMaxFetch))
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// upgradeClient is a station client with the member credential, from
// the join reply the agent keeps in STATE/member.json (an api.JoinReply).
func (a *Agent) upgradeClient() (*api.Client, error) {
	b, err := safefile.ReadSecret(filepath.Join(a.opt.State, "member.json"))
	if err != nil {
		return nil, fmt.Errorf("member credential: %w", err)
	}
	var jr api.JoinReply
	if err := json.Unmarshal(b, &jr); err != nil {
		return nil, fmt.Errorf("member credential %s: %w", filepath.Join(a.opt.State, "member.json"), err)
	}
	if jr.Credential == "" {
		return nil, fmt.Errorf("member credential %s: no credential in it", filepath.Join(a.opt.State, "member.json"))
	}
	stations := a.opt.Stations
	if len(stations) == 0 {
		stations = jr.Stations
	}
	if jr.CA == "" && a.opt.CAFile != "" {
		return api.NewClientCAFile(stations, jr.Credential, a.opt.CAFile)
	}
	return api.NewClient(stations, jr.Credential, []byte(jr.CA))
}

// upTrialMarker is STATE/bin/trial.json: the trial started last, so an old
// binary restarted after the new one crashed does not try it again.
type upTrialMarker struct {
	Rollout string `json:"rollout"`
	SHA256  string `json:"sha256"`
}

func upMarkTrial(state string, o *api.BinaryOrder) error {
	b, _ := json.Marshal(upTrialMarker{o.Rollout, o.SHA256})
	return safefile.WriteSecret(filepath.Join(state, "bin", trialMarkerFile), b)
}

func upTried(state string, o *api.BinaryOrder) bool {
	b, err := os.ReadFile(filepath.Join(state, "bin", trialMarkerFile))
	if err != nil {
		return false
	}
	var m upTrialMarker
	return json.Unmarshal(b, &m) == nil && m.Rollout == o.Rollout && m.SHA256 == o.SHA256
}

// upCleanEnv drops the trial's variables.
func upCleanEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if strings.HasPrefix(e, "CORRAL_ROLLOUT") || strings.HasPrefix(e, EnvRollback+"=") {
			continue
		}
		out = append(out, e)
	}
	return out
}

func upRunning() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}

func upShort(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
