package mgmt

// Rolling upgrades (paper 001's two-phase boot and OS push; docs/mgmt.md
// "Rolling upgrade"): an admin uploads a binary (PUT RouteBinary+SHA256),
// then starts a rollout (POST RouteRollout); one member at a time is
// drained (nodes), ordered to run the binary (Desired.Binary), and must
// report that build healthy within the check time, or it is ordered back
// (Revert) and the rollout stops. The member's side is agent/upgrade.go.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
)

// Rollout limits and defaults.
const (
	maxBinary        = 512 << 20        // PUT RouteBinary body
	defaultCheck     = 30 * time.Second // a member's time to come back healthy
	defaultDrain     = 10 * time.Second // a drained node's time to finish its connections
	rolloutPoll      = 200 * time.Millisecond
	rolloutStateFile = "rollout.json" // DATA/rollout.json: the last rollout
)

// rolloutStore is what the coordinator needs of the station (the store
// methods of store.go); tests give it fake members.
type rolloutStore interface {
	members(ctx context.Context) ([]api.MemberStatus, error)
	drained(ctx context.Context) ([]string, error)
	setDrain(ctx context.Context, node string, drain bool, who string) error
	setBinary(ctx context.Context, member string, o *api.BinaryOrder) error
	audit(ctx context.Context, e api.AuditEntry) error
	event(e api.Event)
}

// rollouts holds each station's rollout state; the Station struct
// belongs to the station core, so this file keeps its own state here.
var rollouts sync.Map // *Station -> *rolloutState

// rolloutState is one station's binaries and its current (or last) rollout.
type rolloutState struct {
	st   rolloutStore
	dir  string // DATA/binaries
	file string // DATA/rollout.json ("" : not kept)

	mu      sync.Mutex
	cur     *api.Rollout // the running or last rollout
	running bool
	done    chan struct{} // closed when the running rollout ends
}

func (s *Station) rollout() *rolloutState {
	if v, ok := rollouts.Load(s); ok {
		return v.(*rolloutState)
	}
	rs := newRolloutState(s, filepath.Join(s.opt.Data, "binaries"), filepath.Join(s.opt.Data, rolloutStateFile))
	v, _ := rollouts.LoadOrStore(s, rs)
	return v.(*rolloutState)
}

func newRolloutState(st rolloutStore, dir, file string) *rolloutState {
	return &rolloutState{st: st, dir: dir, file: file}
}

// routesRollout registers RouteRollout and RouteBinary.
func (s *Station) routesRollout(mux *http.ServeMux) {
	rs := s.rollout()
	mux.HandleFunc("PUT "+api.RouteBinary+"{sha}", s.auth(permAdmin, rs.putBinary))
	mux.HandleFunc("GET "+api.RouteBinary+"{sha}", s.auth(permMember, rs.getBinary))
	mux.HandleFunc("POST "+api.RouteRollout, s.auth(permAdmin, rs.start))
	mux.HandleFunc("GET "+api.RouteRollout, s.auth(permRead, rs.get))
	// A rollout does not survive a restart of the station: one found
	// running is marked failed and its member in progress let go.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rs.recover(ctx); err != nil {
			s.log.Warn("rollout: recovering the last rollout", "err", err)
		}
	}()
}

// roJSON writes v as a JSON answer.
func roJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// roError writes an api.Error answer.
func roError(w http.ResponseWriter, status int, format string, a ...any) {
	roJSON(w, status, api.Error{Error: fmt.Sprintf(format, a...)})
}

// putBinary stores an uploaded binary as DATA/binaries/SHA256 (0755, in a
// 0700 directory), streamed to a temporary file and put in place (synced,
// renamed, directory synced) once its hash is checked.
func (rs *rolloutState) putBinary(w http.ResponseWriter, r *http.Request, p *Principal) {
	sha := r.PathValue("sha")
	if !api.IsSHA256(sha) {
		roError(w, http.StatusBadRequest, "binary: %q is not a sha256 in lowercase hex", sha)
		return
	}
	if err := safefile.MkdirAll(rs.dir); err != nil {
		roError(w, http.StatusInternalServerError, "binary: %v", err)
		return
	}
	f, err := safefile.Create(filepath.Join(rs.dir, sha), 0o755)
	if err != nil {
		roError(w, http.StatusInternalServerError, "binary: %v", err)
		return
	}
	defer f.Abort() // nothing once committed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), http.MaxBytesReader(w, r.Body, maxBinary))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			roError(w, http.StatusRequestEntityTooLarge, "binary: larger than %d bytes", int64(maxBinary))
			return
		}
		roError(w, http.StatusBadRequest, "binary: reading the body: %v", err)
		return
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		roError(w, http.StatusBadRequest, "binary: the body's sha256 is %s, not %s", got, sha)
		return
	}
	if err := f.Commit(); err != nil {
		roError(w, http.StatusInternalServerError, "binary: %v", err)
		return
	}
	rs.st.audit(r.Context(), api.AuditEntry{Time: time.Now(), User: p.Name, Action: "binary-upload", Detail: fmt.Sprintf("%s (%d bytes)", sha, n)})
	roJSON(w, http.StatusOK, map[string]any{"sha256": sha, "size": n})
}

// getBinary serves a stored binary to a member's agent.
func (rs *rolloutState) getBinary(w http.ResponseWriter, r *http.Request, p *Principal) {
	sha := r.PathValue("sha")
	if !api.IsSHA256(sha) {
		roError(w, http.StatusBadRequest, "binary: %q is not a sha256 in lowercase hex", sha)
		return
	}
	f, err := os.Open(filepath.Join(rs.dir, sha))
	if err != nil {
		roError(w, http.StatusNotFound, "binary %s: not uploaded", sha)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		roError(w, http.StatusInternalServerError, "binary: %v", err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, sha, fi.ModTime(), f)
}

// get answers the running or last rollout.
func (rs *rolloutState) get(w http.ResponseWriter, r *http.Request, p *Principal) {
	ro := rs.snapshot()
	if ro == nil {
		roError(w, http.StatusNotFound, "no rollout yet")
		return
	}
	roJSON(w, http.StatusOK, ro)
}

// snapshot is a copy of the current rollout (nil: none).
func (rs *rolloutState) snapshot() *api.Rollout {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.cur == nil {
		rs.load()
	}
	if rs.cur == nil {
		return nil
	}
	c := *rs.cur
	c.Steps = append([]api.RolloutStep(nil), rs.cur.Steps...)
	return &c
}

// load reads the last rollout from its file (rs.mu held).
func (rs *rolloutState) load() {
	if rs.file == "" {
		return
	}
	b, err := os.ReadFile(rs.file)
	if err != nil {
		return
	}
	var ro api.Rollout
	if json.Unmarshal(b, &ro) == nil && ro.ID != "" {
		rs.cur = &ro
	}
}

// save writes the current rollout to its file (rs.mu held), so GET shows
// it after a restart and a restart can tell one was cut short.
func (rs *rolloutState) save() {
	if rs.file == "" || rs.cur == nil {
		return
	}
	b, _ := json.MarshalIndent(rs.cur, "", "  ")
	safefile.WriteSecret(rs.file, b) // best effort: the rollout goes on without it
}

// recover marks a rollout the station was running when it stopped as
// failed, orders its member in progress back to its old binary and
// undrains it.
func (rs *rolloutState) recover(ctx context.Context) error {
	rs.mu.Lock()
	rs.load()
	ro := rs.cur
	if ro == nil || ro.State != "running" || rs.running {
		rs.mu.Unlock()
		return nil
	}
	var busy []int
	for i, st := range ro.Steps {
		switch st.State {
		case "draining", "swapping", "checking", "reverting":
			busy = append(busy, i)
			ro.Steps[i].State = "failed"
			ro.Steps[i].Error = "station restarted during this step"
		}
	}
	ro.State, ro.Error, ro.Ended = "failed", "the station restarted during the rollout", time.Now()
	rs.save()
	steps := append([]api.RolloutStep(nil), ro.Steps...)
	id, sha := ro.ID, ro.SHA256
	rs.mu.Unlock()
	rs.st.event(api.Event{Time: time.Now(), Kind: "rollout", Msg: "rollout " + id + " failed: the station restarted during it"})
	var errs []error
	for _, i := range busy {
		m := steps[i].Member
		// Revert (not a cleared order, which an agent may ignore): a
		// trial goes back, a member still on its old build stays.
		if err := rs.st.setBinary(ctx, m, &api.BinaryOrder{SHA256: sha, Rollout: id, Revert: true}); err != nil {
			errs = append(errs, err)
		}
		if role := rolloutMemberRole(ctx, rs.st, m); role == api.RoleNode {
			if err := rs.st.setDrain(ctx, m, false, "rollout "+id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rolloutMemberRole is the role member last reported ("" unknown).
func rolloutMemberRole(ctx context.Context, st rolloutStore, name string) string {
	ms, err := st.members(ctx)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.Name == name {
			return m.Role
		}
	}
	return ""
}

// start begins a rollout (409 while one runs).
func (rs *rolloutState) start(w http.ResponseWriter, r *http.Request, p *Principal) {
	var req api.RolloutRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		roError(w, http.StatusBadRequest, "rollout request: %v", err)
		return
	}
	ro, status, err := rs.begin(r.Context(), req, p.Name)
	if err != nil {
		roError(w, status, "%v", err)
		return
	}
	roJSON(w, http.StatusOK, ro)
}

// begin checks a request, fixes the members' order and starts the
// coordinator; it returns the rollout as started, or an HTTP status and
// error.
func (rs *rolloutState) begin(ctx context.Context, req api.RolloutRequest, who string) (*api.Rollout, int, error) {
	if !api.IsSHA256(req.SHA256) {
		return nil, http.StatusBadRequest, fmt.Errorf("rollout: sha256 %q is not a sha256 in lowercase hex", req.SHA256)
	}
	if _, err := os.Stat(filepath.Join(rs.dir, req.SHA256)); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("rollout: binary %s is not uploaded (PUT %s%s first)", req.SHA256, api.RouteBinary, req.SHA256)
	}
	if req.Check < 0 || req.Drain < 0 {
		return nil, http.StatusBadRequest, errors.New("rollout: check and drain must not be negative")
	}
	if req.Check == 0 {
		req.Check = defaultCheck
	}
	if req.Drain == 0 {
		req.Drain = defaultDrain
	}
	ms, err := rs.st.members(ctx)
	if err != nil {
		return nil, http.StatusInternalServerError, fmt.Errorf("rollout: members: %v", err)
	}
	order, err := rolloutOrder(ms, req.Members)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if len(order) == 0 {
		return nil, http.StatusBadRequest, errors.New("rollout: no member is up to upgrade")
	}
	rs.mu.Lock()
	if rs.running {
		cur := rs.cur.ID
		rs.mu.Unlock()
		return nil, http.StatusConflict, fmt.Errorf("rollout: rollout %s is running; wait for it to end", cur)
	}
	ro := &api.Rollout{ID: newRolloutID(), SHA256: req.SHA256, State: "running", Started: time.Now()}
	for _, m := range order {
		ro.Steps = append(ro.Steps, api.RolloutStep{Member: m.Name, State: "waiting"})
	}
	rs.cur, rs.running, rs.done = ro, true, make(chan struct{})
	rs.save()
	rs.mu.Unlock()
	names := make([]string, len(order))
	for i, m := range order {
		names[i] = m.Name
	}
	rs.st.audit(ctx, api.AuditEntry{Time: time.Now(), User: who, Action: "rollout",
		Detail: fmt.Sprintf("rollout %s of %s to %s", ro.ID, req.SHA256[:12], strings.Join(names, ","))})
	rs.st.event(api.Event{Time: time.Now(), Kind: "rollout", Msg: fmt.Sprintf("rollout %s of %s started by %s: %s", ro.ID, req.SHA256[:12], who, strings.Join(names, ", "))})
	go rs.run(ro.ID, req, order)
	return rs.snapshot(), http.StatusOK, nil
}

func newRolloutID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// roleRank orders a default rollout: nodes first (the pool absorbs one
// drained node), then I/O servers, meta followers, the meta leader, and
// directors last (they carry every connection).
func roleRank(m api.MemberStatus) int {
	switch m.Role {
	case api.RoleNode:
		return 0
	case api.RoleIOD:
		return 1
	case api.RoleMeta:
		if metaLeader(m) {
			return 3
		}
		return 2
	case api.RoleDirector:
		return 4
	}
	return 5
}

// metaLeader says whether a meta member's report says it leads (a
// "leader": true field; a report without one counts as a follower).
func metaLeader(m api.MemberStatus) bool {
	var r struct {
		Leader bool `json:"leader"`
	}
	return len(m.Report) > 0 && json.Unmarshal(m.Report, &r) == nil && r.Leader
}

// rolloutOrder is the members to upgrade in order: the named ones (each
// must be known and up) in the given order, or every member that is up,
// by role.
func rolloutOrder(ms []api.MemberStatus, names []string) ([]api.MemberStatus, error) {
	byName := map[string]api.MemberStatus{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	if len(names) > 0 {
		var out []api.MemberStatus
		seen := map[string]bool{}
		for _, n := range names {
			m, ok := byName[n]
			switch {
			case !ok:
				return nil, fmt.Errorf("rollout: member %q is not known to the station", n)
			case !m.Up:
				return nil, fmt.Errorf("rollout: member %q is down; it cannot be upgraded now", n)
			case seen[n]:
				return nil, fmt.Errorf("rollout: member %q is listed twice", n)
			}
			seen[n] = true
			out = append(out, m)
		}
		return out, nil
	}
	var out []api.MemberStatus
	for _, m := range ms {
		if m.Up {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if a, b := roleRank(out[i]), roleRank(out[j]); a != b {
			return a < b
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// step sets a step's state (and error) and tells the dashboard.
func (rs *rolloutState) step(i int, state, msg string) {
	rs.mu.Lock()
	ro := rs.cur
	ro.Steps[i].State = state
	if state == "failed" || state == "rolled-back" {
		ro.Steps[i].Error = msg
	}
	m := ro.Steps[i].Member
	id := ro.ID
	rs.save()
	rs.mu.Unlock()
	text := fmt.Sprintf("rollout %s: %s: %s", id, m, state)
	if msg != "" {
		text += ": " + msg
	}
	rs.st.event(api.Event{Time: time.Now(), Kind: "rollout", Member: m, Msg: text})
}

// finish ends the rollout (err nil: done).
func (rs *rolloutState) finish(err error) {
	rs.mu.Lock()
	ro := rs.cur
	ro.State, ro.Ended = "done", time.Now()
	if err != nil {
		ro.State, ro.Error = "failed", err.Error()
	}
	rs.running = false
	rs.save()
	close(rs.done)
	id, state := ro.ID, ro.State
	rs.mu.Unlock()
	msg := "rollout " + id + " done"
	if err != nil {
		msg = "rollout " + id + " failed: " + err.Error()
	}
	rs.st.event(api.Event{Time: time.Now(), Kind: "rollout", Msg: msg})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs.st.audit(ctx, api.AuditEntry{Time: time.Now(), User: "rollout " + id, Action: "rollout-" + state, Detail: msg})
}

// run upgrades the members one at a time and stops at the first failure.
func (rs *rolloutState) run(id string, req api.RolloutRequest, order []api.MemberStatus) {
	// Each step is bounded (drain + 2 checks + slack), so the whole is too.
	for i, m := range order {
		if err := rs.upgradeOne(id, i, req, m); err != nil {
			rs.finish(fmt.Errorf("%s: %v", m.Name, err))
			return
		}
	}
	rs.finish(nil)
}

// upgradeOne drains (a node), orders, checks, and on a failed check
// reverts one member; a nil error means it runs the new build.
func (rs *rolloutState) upgradeOne(id string, i int, req api.RolloutRequest, m api.MemberStatus) error {
	ctx, cancel := context.WithTimeout(context.Background(), req.Drain+2*req.Check+time.Minute)
	defer cancel()
	who := "rollout " + id
	// Its state now, not when the rollout began.
	ms, err := rs.st.members(ctx)
	if err != nil {
		rs.step(i, "failed", err.Error())
		return err
	}
	found := false
	for _, cur := range ms {
		if cur.Name == m.Name {
			m, found = cur, true
		}
	}
	if !found || !m.Up {
		rs.step(i, "failed", "down before its turn; nothing changed on it")
		return errors.New("down before its turn; nothing changed on it")
	}
	if m.Build == req.SHA256 {
		rs.step(i, "done", "")
		return nil // already runs it
	}
	node := m.Role == api.RoleNode
	if node {
		// A node the operator drained stays drained: the rollout neither
		// drains nor undrains it.
		if dr, err := rs.st.drained(ctx); err == nil && slices.Contains(dr, m.Name) {
			node = false
		}
	}
	undrain := func() error {
		if !node {
			return nil
		}
		return rs.st.setDrain(ctx, m.Name, false, who)
	}
	if node {
		rs.step(i, "draining", "")
		if err := rs.st.setDrain(ctx, m.Name, true, who); err != nil {
			rs.step(i, "failed", "drain: "+err.Error())
			return fmt.Errorf("drain: %v", err)
		}
		rs.waitDrained(ctx, m, req.Drain)
	}
	rs.step(i, "swapping", "")
	order := &api.BinaryOrder{SHA256: req.SHA256, Rollout: id, Check: req.Check}
	if err := rs.st.setBinary(ctx, m.Name, order); err != nil {
		undrain()
		rs.step(i, "failed", "order: "+err.Error())
		return fmt.Errorf("order: %v", err)
	}
	rs.step(i, "checking", "")
	why := rs.waitBuild(ctx, m.Name, req.SHA256, req.Check)
	if why == "" {
		if err := undrain(); err != nil {
			rs.step(i, "failed", "undrain: "+err.Error())
			return fmt.Errorf("undrain: %v", err)
		}
		rs.step(i, "done", "")
		return nil
	}
	// The check failed: order the old binary back and wait for it.
	rs.step(i, "reverting", why)
	rev := &api.BinaryOrder{SHA256: req.SHA256, Rollout: id, Check: req.Check, Revert: true}
	if err := rs.st.setBinary(ctx, m.Name, rev); err != nil {
		rs.step(i, "failed", why+"; revert order: "+err.Error())
		return fmt.Errorf("%s; revert order: %v", why, err)
	}
	rwhy := rs.waitBuild(ctx, m.Name, m.Build, req.Check)
	uerr := undrain()
	if rwhy != "" {
		rs.step(i, "failed", why+"; rollback: "+rwhy)
		return fmt.Errorf("%s; and it did not come back on its old build: %s", why, rwhy)
	}
	if uerr != nil {
		rs.step(i, "rolled-back", why+"; undrain: "+uerr.Error())
		return fmt.Errorf("%s (rolled back; undrain: %v)", why, uerr)
	}
	rs.step(i, "rolled-back", why)
	return fmt.Errorf("%s (rolled back to its old build)", why)
}

// waitBuild waits until member reports build and healthy, up to d; it
// returns "" or why not.
func (rs *rolloutState) waitBuild(ctx context.Context, member, build string, d time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	why := "no report"
	t := time.NewTicker(rolloutPoll)
	defer t.Stop()
	for {
		// Its own bound, so the last look before the deadline still
		// reads the member (and the reason names what it saw).
		qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
		ms, err := rs.st.members(qctx)
		qcancel()
		if err != nil {
			why = "station: " + err.Error()
		} else {
			why = "not known to the station"
			for _, m := range ms {
				if m.Name != member {
					continue
				}
				switch {
				case !m.Up:
					why = "down"
				case m.Build != build:
					why = "runs build " + short(m.Build) + ", not " + short(build)
				case !m.Healthy:
					why = "unhealthy"
					if m.Health != "" {
						why += ": " + m.Health
					}
				default:
					return ""
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Sprintf("not back healthy on build %s within %v (last seen: %s)", short(build), d, why)
		case <-t.C:
		}
	}
}

// waitDrained waits, up to d, until every director that reports on node
// gives it weight 0 and no active connection. Directors whose report
// does not list it do not hold it up; without any report it just waits
// one poll, so directors see the drain.
func (rs *rolloutState) waitDrained(ctx context.Context, node api.MemberStatus, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(rolloutPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ms, err := rs.st.members(ctx)
		if err != nil {
			continue
		}
		if !nodeBusy(ms, node.Addr) {
			return
		}
	}
}

// nodeBusy says whether some director still sends to addr or holds
// connections to it.
func nodeBusy(ms []api.MemberStatus, addr string) bool {
	for _, m := range ms {
		if m.Role != api.RoleDirector || !m.Up || len(m.Report) == 0 {
			continue
		}
		var svcs []director.ServiceStatus
		if json.Unmarshal(m.Report, &svcs) != nil {
			continue
		}
		for _, s := range svcs {
			for _, sv := range s.Servers {
				if sv.Addr == addr && (sv.Weight > 0 || sv.Active > 0) {
					return true
				}
			}
		}
	}
	return false
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	if sha == "" {
		return "(none)"
	}
	return sha
}
