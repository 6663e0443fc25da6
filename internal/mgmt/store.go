package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.yaml.in/yaml/v3"
)

// etcd keys, all under /corral/.
const (
	prefix      = "/corral/"
	keyCurrent  = prefix + "cfg/current" // {"version":N}
	keyVersions = prefix + "cfg/v/"      // + %016d: api.Version with YAML
	keyHistory  = prefix + "cfg/h/"      // + %016d: api.Version without YAML (history reads these)
	keyAudit    = prefix + "audit/"      // + %016d: api.AuditEntry
	keyAuditSeq = prefix + "seq/audit"   // last audit sequence number
	keyUsers    = prefix + "users/"      // + NAME: userRecord (password hash)
	keyTokens   = prefix + "tokens/"     // + ID: tokenRecord
	keyMembers  = prefix + "members/"    // + NAME: api.MemberStatus (last report)
	keyDrain    = prefix + "drain/"      // + NAME: "true" | "false" (never deleted: Desired's Rev sees undrains)
	keyBinary   = prefix + "binary/"     // + MEMBER: api.BinaryOrder JSON, "" when cleared
	keyStations = prefix + "stations/"   // + NAME: API URL
	keyCA       = prefix + "tls/ca"      // caPair: the CA every station shares
)

// validate checks a YAML document and returns its canonical form; tests
// swap it while clustercfg is young.
var validate = func(file string, b []byte) ([]byte, error) {
	c, err := clustercfg.Parse(file, b)
	if err != nil {
		return nil, err
	}
	return c.Marshal()
}

// applyOps applies a transaction's changes to a configuration's YAML and
// returns the changed YAML (validated by the caller).
var applyOps = func(base []byte, ops []api.TxOp) ([]byte, error) {
	c := &clustercfg.Config{}
	if len(bytes.TrimSpace(base)) > 0 {
		var err error
		if c, err = clustercfg.Parse("base", base); err != nil {
			return nil, err
		}
	}
	for i, op := range ops {
		if err := c.ApplyOp(op.Op, op.Kind, op.Name, op.Value); err != nil {
			return nil, fmt.Errorf("ops[%d] (%s %s %s): %w", i, op.Op, op.Kind, op.Name, err)
		}
	}
	return c.Marshal()
}

// diffYAML is the unified diff of two canonical documents.
var diffYAML = clustercfg.Diff

// conflictError is a stale base version (409).
type conflictError struct{ current int64 }

func (e *conflictError) Error() string {
	return fmt.Sprintf("stale base version: the current version is %d", e.current)
}

// inputError is bad input (400).
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

// notFoundError is a missing thing (404).
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// asInput makes a validation error a 400 (clustercfg's errors already
// are one, with their paths and lines).
func asInput(err error) error {
	var es clustercfg.Errors
	var e *clustercfg.Error
	if err == nil || errors.As(err, &es) || errors.As(err, &e) {
		return err
	}
	return &inputError{err.Error()}
}

// keySegment says whether s may name one etcd key segment (a user, node,
// member or token): not empty, at most max bytes, no '/' nor NUL.
func keySegment(s string, max int) bool {
	return s != "" && len(s) <= max && !strings.ContainsAny(s, "/\x00")
}

func verKey(v int64) string  { return fmt.Sprintf("%s%016d", keyVersions, v) }
func histKey(v int64) string { return fmt.Sprintf("%s%016d", keyHistory, v) }

type currentRec struct {
	Version int64 `json:"version"`
}

// readCurrent is the current version number and its key's mod revision
// (0, 0 before the first apply).
func (s *Station) readCurrent(ctx context.Context) (int64, int64, error) {
	resp, err := s.cli.Get(ctx, keyCurrent)
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	var c currentRec
	if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", keyCurrent, err)
	}
	return c.Version, resp.Kvs[0].ModRevision, nil
}

// version reads one stored version (with YAML); version 0 is the empty
// configuration.
func (s *Station) version(ctx context.Context, v int64) (api.Version, error) {
	if v == 0 {
		return api.Version{}, nil
	}
	resp, err := s.cli.Get(ctx, verKey(v))
	if err != nil {
		return api.Version{}, err
	}
	if len(resp.Kvs) == 0 {
		return api.Version{}, &notFoundError{fmt.Sprintf("no version %d", v)}
	}
	var out api.Version
	if err := json.Unmarshal(resp.Kvs[0].Value, &out); err != nil {
		return api.Version{}, fmt.Errorf("version %d: %w", v, err)
	}
	return out, nil
}

// current is the current configuration version (with YAML).
func (s *Station) current(ctx context.Context) (api.Version, error) {
	v, _, err := s.readCurrent(ctx)
	if err != nil {
		return api.Version{}, err
	}
	return s.version(ctx, v)
}

// history is the stored versions, newest first, without YAML.
func (s *Station) history(ctx context.Context, limit int) ([]api.Version, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := s.cli.Get(ctx, keyHistory, opts...)
	if err != nil {
		return nil, err
	}
	out := make([]api.Version, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var v api.Version
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		v.YAML = ""
		out = append(out, v)
	}
	return out, nil
}

// commit runs one change as an etcd transaction together with its audit
// entry. build reads what it needs and returns the compares and puts of
// the change (it runs again if only the audit counter moved); entry is
// filled in by build (Version, Detail).
func (s *Station) commit(ctx context.Context, entry *api.AuditEntry, build func() ([]clientv3.Cmp, []clientv3.Op, error)) error {
	for i := 0; i < 100; i++ {
		resp, err := s.cli.Get(ctx, keyAuditSeq)
		if err != nil {
			return err
		}
		var seq, seqRev int64
		if len(resp.Kvs) > 0 {
			seq, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			seqRev = resp.Kvs[0].ModRevision
		}
		cmps, ops, err := build()
		if err != nil {
			return err
		}
		seq++
		entry.Seq = seq
		if entry.Time.IsZero() {
			entry.Time = time.Now().UTC()
		}
		eb, _ := json.Marshal(entry)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keyAuditSeq), "=", seqRev))
		ops = append(ops, clientv3.OpPut(keyAuditSeq, strconv.FormatInt(seq, 10)),
			clientv3.OpPut(fmt.Sprintf("%s%016d", keyAudit, seq), string(eb)))
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return err
		}
		if tr.Succeeded {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.New("too much contention on the station's store, try again")
}

// audit appends an entry to the audit log.
func (s *Station) audit(ctx context.Context, e api.AuditEntry) error {
	return s.commit(ctx, &e, func() ([]clientv3.Cmp, []clientv3.Op, error) { return nil, nil, nil })
}

// auditLog is the last limit entries, newest first.
func (s *Station) auditLog(ctx context.Context, limit int) ([]api.AuditEntry, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := s.cli.Get(ctx, keyAudit, opts...)
	if err != nil {
		return nil, err
	}
	out := make([]api.AuditEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var e api.AuditEntry
		if json.Unmarshal(kv.Value, &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// storeYAML stores canonical YAML as the next version on base (-1: any)
// for action (apply, rollback, tx); it answers Unchanged without a new
// version when the canonical YAML equals the current one.
func (s *Station) storeYAML(ctx context.Context, base int64, canon []byte, who, action, comment string) (api.ApplyReply, error) {
	var reply api.ApplyReply
	entry := &api.AuditEntry{User: who, Action: action, Detail: comment}
	unchanged := errors.New("unchanged")
	err := s.commit(ctx, entry, func() ([]clientv3.Cmp, []clientv3.Op, error) {
		cur, rev, err := s.readCurrent(ctx)
		if err != nil {
			return nil, nil, err
		}
		if base >= 0 && base != cur {
			return nil, nil, &conflictError{cur}
		}
		old, err := s.version(ctx, cur)
		if err != nil {
			return nil, nil, err
		}
		reply = api.ApplyReply{Version: cur, Diff: diffYAML([]byte(old.YAML), canon)}
		if old.YAML == string(canon) && cur > 0 {
			reply.Unchanged = true
			return nil, nil, unchanged
		}
		gone, err := s.accountsGone(ctx, old.YAML, string(canon))
		if err != nil {
			return nil, nil, err
		}
		// A director that reads the new version must find its HA group's
		// keys open to it; roles it loses go once the version is stored.
		if nc, err := clustercfg.Parse("new version", canon); err == nil {
			if err := s.grantHAGroups(ctx, nc); err != nil {
				return nil, nil, fmt.Errorf("directors' etcd roles: %w", err)
			}
		}
		nv := api.Version{Version: cur + 1, Parent: cur, Author: who, Comment: comment, Time: time.Now().UTC(), YAML: string(canon)}
		vb, _ := json.Marshal(nv)
		nv.YAML = ""
		hb, _ := json.Marshal(nv)
		cb, _ := json.Marshal(currentRec{Version: nv.Version})
		reply.Version = nv.Version
		entry.Version = nv.Version
		return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(keyCurrent), "=", rev)},
			append([]clientv3.Op{clientv3.OpPut(verKey(nv.Version), string(vb)), clientv3.OpPut(histKey(nv.Version), string(hb)),
				clientv3.OpPut(keyCurrent, string(cb))}, gone...), nil
	})
	var ce *conflictError
	switch {
	case errors.Is(err, unchanged):
		return reply, nil
	case errors.As(err, &ce):
		s.met.conflicts.Inc()
		return reply, err
	case err != nil:
		return reply, err
	}
	s.met.applies.Inc()
	s.noteVersionEvent(reply.Version)
	s.event(api.Event{Kind: action, Version: reply.Version, Msg: fmt.Sprintf("%s made version %d", who, reply.Version)})
	return reply, nil
}

// accountsGone is what removing accounts from a configuration does to
// them: their password hashes deleted and their API tokens revoked, so an
// account added again later under the same name (someone else, maybe)
// starts afresh. At most 100 ops; tokens beyond expire.
func (s *Station) accountsGone(ctx context.Context, oldYAML, newYAML string) ([]clientv3.Op, error) {
	names := func(y string) map[string]bool {
		var doc struct {
			Accounts []struct {
				Name string `yaml:"name"`
			} `yaml:"accounts"`
		}
		_ = yaml.Unmarshal([]byte(y), &doc) // canonical YAML; unreadable: no accounts
		m := map[string]bool{}
		for _, a := range doc.Accounts {
			m[a.Name] = true
		}
		return m
	}
	was, now := names(oldYAML), names(newYAML)
	gone := map[string]bool{}
	for n := range was {
		if !now[n] && n != "admin" && keySegment(n, 128) {
			gone[n] = true
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	var ops []clientv3.Op
	for n := range gone {
		ops = append(ops, clientv3.OpDelete(keyUsers+n))
	}
	toks, err := s.tokenRecords(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range toks {
		if t.Kind == kindAPI && gone[t.User] && !t.Revoked && len(ops) < 100 {
			t.Revoked = true
			ops = append(ops, tokenPut(t))
		}
	}
	return ops, nil
}

// apply validates YAML and stores it (or, DryRun, only diffs it).
func (s *Station) apply(ctx context.Context, req api.ApplyRequest, who string) (api.ApplyReply, error) {
	if len(req.YAML) > clustercfg.MaxDocument {
		// Said before parsing: the body limit is twice this (JSON escaping).
		return api.ApplyReply{}, &inputError{fmt.Sprintf("configuration of %d bytes: at most %d", len(req.YAML), clustercfg.MaxDocument)}
	}
	canon, err := validate("config.yaml", []byte(req.YAML))
	if err != nil {
		return api.ApplyReply{}, asInput(err)
	}
	if req.DryRun {
		return s.diffWith(ctx, req.Base, canon)
	}
	return s.storeYAML(ctx, req.Base, canon, who, "apply", req.Comment)
}

// diffWith is what applying canon on base would change, nothing stored.
func (s *Station) diffWith(ctx context.Context, base int64, canon []byte) (api.ApplyReply, error) {
	cur, err := s.current(ctx)
	if err != nil {
		return api.ApplyReply{}, err
	}
	if base >= 0 && base != cur.Version {
		s.met.conflicts.Inc()
		return api.ApplyReply{}, &conflictError{cur.Version}
	}
	return api.ApplyReply{Version: cur.Version, Diff: diffYAML([]byte(cur.YAML), canon),
		Unchanged: cur.YAML == string(canon) && cur.Version > 0}, nil
}

// rollback makes a new version with an old version's YAML.
func (s *Station) rollback(ctx context.Context, req api.RollbackRequest, who string) (api.ApplyReply, error) {
	if req.To <= 0 {
		return api.ApplyReply{}, &inputError{"rollback: give the version to go back to (to >= 1)"}
	}
	old, err := s.version(ctx, req.To)
	if err != nil {
		return api.ApplyReply{}, err
	}
	canon, err := validate(fmt.Sprintf("version %d", req.To), []byte(old.YAML))
	if err != nil {
		return api.ApplyReply{}, asInput(err)
	}
	comment := req.Comment
	if comment == "" {
		comment = fmt.Sprintf("rollback to version %d", req.To)
	}
	return s.storeYAML(ctx, req.Base, canon, who, "rollback", comment)
}

// tx applies every op on Base's configuration and stores one version.
func (s *Station) tx(ctx context.Context, req api.TxRequest, who string) (api.ApplyReply, error) {
	if len(req.Ops) == 0 {
		return api.ApplyReply{}, &inputError{"tx: no ops"}
	}
	for i, op := range req.Ops {
		if op.Op != "put" && op.Op != "delete" {
			return api.ApplyReply{}, &inputError{fmt.Sprintf("tx: ops[%d].op %q: want put or delete", i, op.Op)}
		}
	}
	base := req.Base
	cur, err := s.current(ctx)
	if err != nil {
		return api.ApplyReply{}, err
	}
	if base < 0 {
		base = cur.Version
	}
	if base != cur.Version {
		s.met.conflicts.Inc()
		return api.ApplyReply{}, &conflictError{cur.Version}
	}
	out, err := applyOps([]byte(cur.YAML), req.Ops)
	if err != nil {
		return api.ApplyReply{}, asInput(err)
	}
	canon, err := validate("tx", out)
	if err != nil {
		return api.ApplyReply{}, asInput(err)
	}
	comment := req.Comment
	if comment == "" {
		comment = fmt.Sprintf("%d ops", len(req.Ops))
	}
	// base pins the version the ops were applied on.
	return s.storeYAML(ctx, base, canon, who, "tx", comment)
}

// desired is what member should run: read in one etcd transaction so
// Rev covers exactly what it returns.
func (s *Station) desired(ctx context.Context, member string) (api.Desired, int64, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(keyCurrent),
		clientv3.OpGet(keyDrain, clientv3.WithPrefix()),
		clientv3.OpGet(keyBinary+member),
	).Commit()
	if err != nil {
		return api.Desired{}, 0, err
	}
	var d api.Desired
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		d.Rev = kvs[0].ModRevision
		var c currentRec
		if err := json.Unmarshal(kvs[0].Value, &c); err != nil {
			return d, 0, fmt.Errorf("%s: %w", keyCurrent, err)
		}
		d.Version = c.Version
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		d.Rev = max(d.Rev, kv.ModRevision)
		if string(kv.Value) == "true" {
			d.Drained = append(d.Drained, trimPrefix(kv.Key, keyDrain))
		}
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		d.Rev = max(d.Rev, kvs[0].ModRevision)
		if len(kvs[0].Value) > 0 {
			var o api.BinaryOrder
			if json.Unmarshal(kvs[0].Value, &o) == nil {
				d.Binary = &o
			}
		}
	}
	if d.Version > 0 {
		v, err := s.version(ctx, d.Version)
		if err != nil {
			return d, 0, err
		}
		d.YAML = v.YAML
	}
	return d, resp.Header.Revision, nil
}

// waitDesired answers as soon as member's Desired has a Rev above after,
// or after wait. A member whose after is beyond the store's revision
// (a station restored from a backup) is answered at once.
func (s *Station) waitDesired(ctx context.Context, member string, after int64, wait time.Duration) (api.Desired, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		s.wakeMu.Lock()
		wake := s.wake
		s.wakeMu.Unlock()
		d, head, err := s.desired(ctx, member)
		if err != nil || d.Rev > after || after > head || wait <= 0 {
			return d, err
		}
		select {
		case <-wake:
		case <-deadline.C:
			return d, nil
		case <-ctx.Done():
			return d, ctx.Err()
		}
	}
}

// watch wakes long polls whenever a configuration, drain or binary key
// changes (on this station or another one).
func (s *Station) watch(ctx context.Context) {
	for ctx.Err() == nil {
		wc := s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix())
		for wr := range wc {
			hit := false
			var newVer int64
			for _, ev := range wr.Events {
				k := string(ev.Kv.Key)
				if k == keyCurrent || strings.HasPrefix(k, keyDrain) || strings.HasPrefix(k, keyBinary) {
					hit = true
				}
				if strings.HasPrefix(k, keyTokens) {
					s.kickCRL() // a revoked director's certificate
					s.kickHA()  // a director that joined
				}
				if k == keyCurrent {
					s.kickHA() // directors moved between groups
				}
				var c currentRec
				if k == keyCurrent && json.Unmarshal(ev.Kv.Value, &c) == nil {
					newVer = c.Version
				}
			}
			if hit || wr.Canceled {
				s.wakeAll()
			}
			if newVer > 0 {
				go s.remoteVersionEvent(ctx, newVer) // never delays the next wake
			}
		}
		// The watch ended (etcd restarted, leader lost): wake everyone so
		// they re-read, then watch again.
		s.wakeAll()
		s.kickCRL()
		s.kickHA()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Station) wakeAll() {
	s.wakeMu.Lock()
	close(s.wake)
	s.wake = make(chan struct{})
	s.wakeMu.Unlock()
}

// report stores a member's report, stamped Seen now.
func (s *Station) report(ctx context.Context, st api.MemberStatus) error {
	st.Seen = time.Now().UTC()
	st.Up = false
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = s.cli.Put(ctx, keyMembers+st.Name, string(b))
	return err
}

// members is every member's last report, Up set by MemberTimeout.
func (s *Station) members(ctx context.Context) ([]api.MemberStatus, error) {
	resp, err := s.cli.Get(ctx, keyMembers, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]api.MemberStatus, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var m api.MemberStatus
		if json.Unmarshal(kv.Value, &m) != nil {
			continue
		}
		m.Up = now.Sub(m.Seen) < s.opt.MemberTimeout
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// monitorMembers emits member-up and member-down events and keeps the
// members-up gauge.
func (s *Station) monitorMembers(ctx context.Context) {
	up := map[string]bool{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ms, err := s.members(ctx)
		if err != nil {
			continue
		}
		n := 0
		for _, m := range ms {
			if m.Up {
				n++
			}
			was, known := up[m.Name]
			if known && was != m.Up {
				kind, msg := "member-down", "not heard from in "+s.opt.MemberTimeout.String()
				if m.Up {
					kind, msg = "member-up", "reporting again"
				}
				s.event(api.Event{Kind: kind, Member: m.Name, Msg: msg})
			}
			up[m.Name] = m.Up
		}
		s.met.membersUp.Set(float64(n))
	}
}

// drained is the names of drained nodes.
func (s *Station) drained(ctx context.Context) ([]string, error) {
	d, _, err := s.desired(ctx, "")
	return d.Drained, err
}

// setDrain drains or undrains a node (who: for the audit log); members
// see it through Desired.Drained.
func (s *Station) setDrain(ctx context.Context, node string, drain bool, who string) error {
	if !keySegment(node, 253) {
		return &inputError{fmt.Sprintf("drain: bad node name %q", node)}
	}
	action := "undrain"
	if drain {
		action = "drain"
	}
	e := &api.AuditEntry{User: who, Action: action, Detail: node}
	err := s.commit(ctx, e, func() ([]clientv3.Cmp, []clientv3.Op, error) {
		return nil, []clientv3.Op{clientv3.OpPut(keyDrain+node, strconv.FormatBool(drain))}, nil
	})
	if err == nil {
		s.event(api.Event{Kind: action, Member: node, Msg: who + " " + action + "ed " + node})
	}
	return err
}

// setBinary sets (or clears, o nil) the binary order of one member;
// members see it through Desired.Binary.
func (s *Station) setBinary(ctx context.Context, member string, o *api.BinaryOrder) error {
	v := ""
	if o != nil {
		b, _ := json.Marshal(o)
		v = string(b)
	}
	// Cleared orders stay as "" so Desired's Rev moves.
	_, err := s.cli.Put(ctx, keyBinary+member, v)
	return err
}

const maxEvents = 200

// event records an event (kept, last 200, for the dashboard; logged).
func (s *Station) event(e api.Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	s.log.Info("event", "kind", e.Kind, "member", e.Member, "version", e.Version, "msg", e.Msg)
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.events = append(s.events, e)
	if len(s.events) > maxEvents {
		s.events = append(s.events[:0:0], s.events[len(s.events)-maxEvents:]...)
	}
	for c := range s.subs {
		select {
		case c <- e:
		default:
			// A slow subscriber is dropped, never waited for.
			close(c)
			delete(s.subs, c)
		}
	}
}

// recentEvents is the last n events, oldest first.
func (s *Station) recentEvents(n int) []api.Event {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if n > len(s.events) || n <= 0 {
		n = len(s.events)
	}
	return append([]api.Event(nil), s.events[len(s.events)-n:]...)
}

// subscribe gets every event from now on until cancel; the channel is
// closed when the subscriber falls 64 events behind or the station closes.
func (s *Station) subscribe() (<-chan api.Event, func()) {
	c := make(chan api.Event, 64)
	s.evMu.Lock()
	s.subs[c] = struct{}{}
	s.evMu.Unlock()
	return c, func() {
		s.evMu.Lock()
		defer s.evMu.Unlock()
		if _, ok := s.subs[c]; ok {
			delete(s.subs, c)
			close(c)
		}
	}
}

// noteVersionEvent records that this station announced version v.
func (s *Station) noteVersionEvent(v int64) {
	s.evMu.Lock()
	s.lastVerEvent = max(s.lastVerEvent, v)
	s.evMu.Unlock()
}

// remoteVersionEvent announces a version another station made (one this
// station has not announced), so every station's dashboard sees it.
func (s *Station) remoteVersionEvent(ctx context.Context, v int64) {
	// The local apply announces its version right after its commit; give
	// it a moment so it is not announced twice.
	time.Sleep(50 * time.Millisecond)
	s.evMu.Lock()
	seen := v <= s.lastVerEvent
	s.evMu.Unlock()
	if seen {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ver, err := s.version(rctx, v)
	if err != nil {
		return
	}
	s.noteVersionEvent(v)
	s.event(api.Event{Kind: "apply", Version: v, Time: ver.Time,
		Msg: fmt.Sprintf("%s made version %d on another station (%s)", ver.Author, v, ver.Comment)})
}
