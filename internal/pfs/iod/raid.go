package iod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/safefile"
)

// RAID inside one I/O server: several data directories (disks).
//
// RAID-0 stripes each object's 64 KiB blocks over the directories (block
// b in directory b mod N, at local block b div N); every directory holds a
// file per object, with its own checksum sidecar. RAID-1 keeps the whole
// object (and sidecar) in every directory and reads from any current one.
// The identity, the store marker and LOCK stay in the first directory,
// which must be present; each directory holds raid.state (mode, members,
// which are current, a generation), the newest generation wins.
const (
	RAID0 = 0
	RAID1 = 1

	modeSingle = -1
)

const raidStateFile = "raid.state"

// RebuildCheck is how often a RAID-1 server looks for a returned disk.
const RebuildCheck = 30 * time.Second

// member states
const (
	memberOK         = iota // current: read and written
	memberOut               // missing or failed: neither
	memberRebuilding        // being copied: written, not read
)

type member struct {
	dir   string
	state int32 // under s.raidMu; read with s.memberState
}

type raidState struct {
	id   string
	mode int
	gen  uint64
	dirs []string
	ok   []bool
}

func (r raidState) text() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "corral raid\nid %s\nmode %d\ngen %d\n", r.id, r.mode, r.gen)
	for i, d := range r.dirs {
		st := "out"
		if r.ok[i] {
			st = "ok"
		}
		fmt.Fprintf(&b, "member %s %s\n", st, d)
	}
	return []byte(b.String())
}

func parseRAIDState(b []byte) (raidState, error) {
	var r raidState
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 4 || lines[0] != "corral raid" {
		return r, errors.New("not a raid.state file")
	}
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, " ")
		var err error
		switch k {
		case "id":
			r.id = v
		case "mode":
			r.mode, err = strconv.Atoi(v)
		case "gen":
			r.gen, err = strconv.ParseUint(v, 10, 64)
		case "member":
			st, d, ok := strings.Cut(v, " ")
			if !ok || (st != "ok" && st != "out") {
				return r, fmt.Errorf("bad member line %q", l)
			}
			r.dirs = append(r.dirs, d)
			r.ok = append(r.ok, st == "ok")
		default:
			return r, fmt.Errorf("unknown line %q", l)
		}
		if err != nil {
			return r, fmt.Errorf("line %q: %v", l, err)
		}
	}
	return r, nil
}

func readRAIDState(dir string) (raidState, bool, error) {
	p := filepath.Join(dir, raidStateFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return raidState{}, false, nil
	}
	if err != nil {
		return raidState{}, false, err
	}
	r, err := parseRAIDState(b)
	if err != nil {
		return r, false, fmt.Errorf("%s: %v", p, err)
	}
	return r, true, nil
}

// setupRAID checks and records the members of a store of several
// directories (the first already opened and locked).
func (s *Store) setupRAID(dirs []string, mode int) error {
	if mode != RAID0 && mode != RAID1 {
		return fmt.Errorf("RAID level %d: only 0 (striping) and 1 (mirroring) are built", mode)
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		a, _ := filepath.Abs(d)
		if seen[a] {
			return fmt.Errorf("data directory %s given twice", d)
		}
		seen[a] = true
	}
	s.mode = mode
	s.members = make([]*member, len(dirs))
	present := make([]bool, len(dirs))
	for i, d := range dirs {
		s.members[i] = &member{dir: d, state: memberOut}
		err := checkDir(d)
		if err != nil && (mode == RAID0 || i == 0) {
			return fmt.Errorf("RAID-%d data directory %s: %v: refusing to start (%s)", mode, d, err,
				map[int]string{RAID0: "RAID-0 has no redundancy: the blocks striped there are needed", RAID1: "the first directory holds the identity"}[mode])
		}
		if err != nil {
			s.log.Warn("RAID-1 data directory missing: running degraded; it is copied when it comes back", "dir", d, "err", err)
			continue
		}
		present[i] = true
	}
	// The newest state of any present member.
	var st raidState
	found := false
	states := make([]bool, len(dirs))
	for i, d := range dirs {
		if !present[i] {
			continue
		}
		r, ok, err := readRAIDState(d)
		if err != nil {
			return err
		}
		states[i] = ok
		if ok && (!found || r.gen > st.gen) {
			st, found = r, true
		}
	}
	if !found {
		if mode == RAID0 {
			for i, d := range dirs {
				if n, _ := countObjects(d); n > 0 {
					return fmt.Errorf("RAID-0 data directory %s already holds %d objects: a new RAID-0 set needs empty directories (objects cannot be re-striped)", dirs[i], n)
				}
			}
		}
		b := make([]byte, 8)
		rand.Read(b)
		st = raidState{id: hex.EncodeToString(b), mode: mode, dirs: dirs, ok: make([]bool, len(dirs))}
		st.ok[0] = true
		// A new set of empty directories is current as it is; a store
		// that becomes a RAID-1 set is copied into its new members.
		if n, _ := countObjects(dirs[0]); n == 0 && mode == RAID1 {
			for i := range st.ok {
				if n, _ := countObjects(dirs[i]); present[i] && n == 0 {
					st.ok[i] = true
				}
			}
		}
		if mode == RAID0 {
			for i := range st.ok {
				st.ok[i] = true
			}
		}
	}
	if st.mode != mode {
		return fmt.Errorf("%s: the data directories are a RAID-%d set, not RAID-%d", filepath.Join(dirs[0], raidStateFile), st.mode, mode)
	}
	if mode == RAID0 {
		if found && (len(st.dirs) != len(dirs)) {
			return fmt.Errorf("%s: a RAID-0 set of %d directories (%s), given %d: the stripes cannot be re-arranged",
				filepath.Join(dirs[0], raidStateFile), len(st.dirs), strings.Join(st.dirs, ","), len(dirs))
		}
		for i, d := range dirs {
			if found && !states[i] {
				return fmt.Errorf("RAID-0 data directory %s has no %s: not a disk of this set (replaced or wiped?): its blocks are lost; refusing to start", d, raidStateFile)
			}
			s.members[i].state = memberOK
		}
	} else {
		byDir := map[string]bool{}
		for i, d := range st.dirs {
			byDir[d] = st.ok[i]
		}
		for i, d := range dirs {
			if present[i] && byDir[d] && (states[i] || !found) {
				s.members[i].state = memberOK
			}
		}
		if s.members[0].state != memberOK && !found {
			s.members[0].state = memberOK
		}
		ok := false
		for _, m := range s.members {
			ok = ok || m.state == memberOK
		}
		if !ok {
			return fmt.Errorf("RAID-1: no data directory of %s is current", strings.Join(dirs, ","))
		}
	}
	s.raidID, s.raidGen = st.id, st.gen
	if err := s.saveRAIDState(); err != nil {
		return err
	}
	if d := s.degraded(); d != "" {
		s.log.Warn("RAID-1 degraded", "out", d)
	}
	return nil
}

// checkDir reports whether d is a usable directory (it is never created:
// a missing disk's mount point must not become an empty member).
func checkDir(d string) error {
	fi, err := os.Stat(d)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return prepareDir(d)
}

func countObjects(dir string) (int, error) {
	root := filepath.Join(dir, "objects")
	ds, err := os.ReadDir(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range ds {
		if !d.IsDir() {
			continue
		}
		es, _ := os.ReadDir(filepath.Join(root, d.Name()))
		for _, e := range es {
			if _, ok := parseObject(e.Name(), false); ok {
				n++
			}
		}
	}
	return n, nil
}

// saveRAIDState records the members' states (a new generation) in every
// member that is written.
func (s *Store) saveRAIDState() error {
	s.raidMu.Lock()
	defer s.raidMu.Unlock()
	return s.saveRAIDStateLocked()
}

func (s *Store) saveRAIDStateLocked() error {
	s.raidGen++
	st := raidState{id: s.raidID, mode: s.mode, gen: s.raidGen}
	for _, m := range s.members {
		st.dirs = append(st.dirs, m.dir)
		st.ok = append(st.ok, m.state == memberOK)
	}
	var first error
	for _, m := range s.members {
		if m.state == memberOut {
			continue
		}
		if err := safefile.WriteSecret(filepath.Join(m.dir, raidStateFile), st.text()); err != nil && first == nil {
			first = fmt.Errorf("record RAID state in %s: %w", m.dir, err)
		}
	}
	return first
}

func (s *Store) memberState(i int) int32 {
	s.raidMu.Lock()
	defer s.raidMu.Unlock()
	return s.members[i].state
}

// readers are the members reads may use; writers those writes go to.
func (s *Store) readers() []int { return s.membersIn(memberOK) }
func (s *Store) writers() []int { return s.membersIn(memberOK, memberRebuilding) }
func (s *Store) membersIn(states ...int32) []int {
	if len(s.members) == 1 {
		return []int{0}
	}
	s.raidMu.Lock()
	defer s.raidMu.Unlock()
	var out []int
	for i, m := range s.members {
		for _, st := range states {
			if m.state == st {
				out = append(out, i)
			}
		}
	}
	return out
}

// degraded names the RAID-1 members not current ("" when none).
func (s *Store) degraded() string {
	if s.mode != RAID1 {
		return ""
	}
	s.raidMu.Lock()
	defer s.raidMu.Unlock()
	var out []string
	for _, m := range s.members {
		switch m.state {
		case memberOut:
			out = append(out, m.dir+" (missing or failed)")
		case memberRebuilding:
			out = append(out, m.dir+" (being rebuilt)")
		}
	}
	return strings.Join(out, ", ")
}

func (s *Store) degradedCount() int {
	if s.mode != RAID1 {
		return 0
	}
	return len(s.members) - len(s.readers())
}

// fail takes a RAID-1 member out after an I/O error (the others took the
// request): it is copied again when it works.
func (s *Store) fail(i int, err error) {
	s.raidMu.Lock()
	defer s.raidMu.Unlock()
	if s.members[i].state == memberOut {
		return
	}
	s.members[i].state = memberOut
	s.log.Warn("RAID-1 data directory failed: running degraded", "dir", s.members[i].dir, "err", err)
	if err := s.saveRAIDStateLocked(); err != nil {
		s.log.Warn("RAID-1: cannot record the failure", "err", err)
	}
}

// rebuildLoop copies returned members back every interval until ctx ends.
func (s *Store) rebuildLoop(ctx context.Context, every time.Duration) {
	if s.mode != RAID1 {
		return
	}
	s.checkMembers()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.checkMembers()
		}
	}
}

// checkMembers rebuilds every RAID-1 member that is out but reachable.
func (s *Store) checkMembers() {
	if s.mode != RAID1 {
		return
	}
	for i := range s.members {
		if s.memberState(i) != memberOut || checkDir(s.members[i].dir) != nil {
			continue
		}
		if err := s.rebuild(i); err != nil {
			s.log.Warn("RAID-1 rebuild failed; retried later", "dir", s.members[i].dir, "err", err)
		}
	}
}

// rebuild copies every object from a current member into member i, which
// meanwhile receives writes (not reads), and removes what it holds beyond
// them. Each object is copied under its lock, so no write interleaves.
func (s *Store) rebuild(i int) error {
	rs := s.readers()
	if len(rs) == 0 {
		return errors.New("no current member to copy from")
	}
	src := rs[0]
	s.raidMu.Lock()
	s.members[i].state = memberRebuilding
	s.raidMu.Unlock()
	s.log.Info("RAID-1 rebuilding data directory", "dir", s.members[i].dir, "from", s.members[src].dir)
	start := time.Now()
	err := s.copyAll(src, i)
	s.raidMu.Lock()
	if err != nil || s.members[i].state != memberRebuilding {
		if err == nil {
			err = errors.New("failed during the rebuild")
		}
		s.members[i].state = memberOut
		s.raidMu.Unlock()
		return err
	}
	s.members[i].state = memberOK
	err = s.saveRAIDStateLocked()
	s.raidMu.Unlock()
	s.rebuilds.Add(1)
	s.log.Info("RAID-1 data directory rebuilt", "dir", s.members[i].dir, "took", time.Since(start).Round(time.Millisecond))
	return err
}

func (s *Store) copyAll(src, dst int) error {
	names := func(m int) (map[string]objKey, error) {
		out := map[string]objKey{}
		root := filepath.Join(s.members[m].dir, "objects")
		ds, err := os.ReadDir(root)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if !d.IsDir() || len(d.Name()) != 2 {
				continue
			}
			es, err := os.ReadDir(filepath.Join(root, d.Name()))
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				if r, ok := parseObject(e.Name(), false); ok && e.Type().IsRegular() {
					out[filepath.Join(d.Name(), e.Name())] = objKey{r.Ino, r.Index}
				}
			}
		}
		return out, nil
	}
	have, err := names(src)
	if err != nil {
		return err
	}
	for rel, k := range have {
		if err := s.copyObject(src, dst, rel, k); err != nil {
			return err
		}
	}
	extra, err := names(dst)
	if err != nil {
		return err
	}
	for rel, k := range extra {
		if _, ok := have[rel]; ok {
			continue
		}
		l := s.olock(k)
		l.Lock()
		if _, err := os.Stat(filepath.Join(s.members[src].dir, "objects", rel)); errors.Is(err, os.ErrNotExist) {
			p := filepath.Join(s.members[dst].dir, "objects", rel)
			os.Remove(p)
			os.Remove(sumPath(p))
		}
		l.Unlock()
	}
	return nil
}

func (s *Store) copyObject(src, dst int, rel string, k objKey) error {
	l := s.olock(k)
	l.Lock()
	defer l.Unlock()
	from := filepath.Join(s.members[src].dir, "objects", rel)
	to := filepath.Join(s.members[dst].dir, "objects", rel)
	for _, p := range []string{from, sumPath(from)} {
		q := to + p[len(from):]
		err := copyFile(p, q)
		if errors.Is(err, os.ErrNotExist) && p != from {
			err = os.Remove(q) // no sidecar: none in the copy either
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		}
		if errors.Is(err, os.ErrNotExist) && p == from {
			os.Remove(to)
			os.Remove(sumPath(to))
			return nil // removed meanwhile
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies p to q durably, keeping holes of whole zero blocks.
func copyFile(p, q string) error {
	in, err := os.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := durable.MkdirAll(filepath.Dir(q), 0o700); err != nil {
		return err
	}
	out, err := durable.Create(q, os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := in.ReadAt(buf, off)
		for at := 0; at < n; at += csBlock {
			b := buf[at:min(at+csBlock, n)]
			if !isZero(b) {
				if _, err := out.WriteAt(b, off+int64(at)); err != nil {
					return err
				}
			}
		}
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := out.Truncate(off); err != nil {
		return err
	}
	return out.Sync()
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// RAID-0 block mapping: global block b lives in member b mod N at local
// block b div N.

// pieces calls fn for each part of [off, off+n) within one block.
func (s *Store) pieces(off, n int64, fn func(m int, loff, goff, ln int64) error) error {
	N := int64(len(s.members))
	for n > 0 {
		b, in := off/csBlock, off%csBlock
		ln := min(n, csBlock-in)
		if err := fn(int(b%N), (b/N)*csBlock+in, off, ln); err != nil {
			return err
		}
		off += ln
		n -= ln
	}
	return nil
}

// globalOff is where member m's local offset lies in the object.
func (s *Store) globalOff(m int, loff int64) int64 {
	N := int64(len(s.members))
	return ((loff/csBlock)*N+int64(m))*csBlock + loff%csBlock
}

// globalEnd is the object end that member m's local size implies.
func globalEnd(m, n int, lsize int64) int64 {
	if lsize == 0 {
		return 0
	}
	lb := (lsize - 1) / csBlock
	return (lb*int64(n)+int64(m))*csBlock + lsize - lb*csBlock
}

// localSize is member m's local size for an object of size.
func localSize(m, n int, size int64) int64 {
	g, rem := size/csBlock, size%csBlock
	var cnt int64
	if g > int64(m) {
		cnt = (g - int64(m) + int64(n) - 1) / int64(n)
	}
	l := cnt * csBlock
	if rem > 0 && g%int64(n) == int64(m) {
		l += rem
	}
	return l
}

// open0 opens object k in every member (entries nil where missing when
// reading); created when a member's file was new.
func (s *Store) open0(k objKey, write bool) ([]*ofile, error) {
	fs := make([]*ofile, len(s.members))
	for m := range s.members {
		o, created, err := openFile(s.pathIn(m, k), write)
		if err != nil {
			closeAll(fs)
			return nil, fmt.Errorf("%s: %w", s.members[m].dir, err)
		}
		if created {
			s.markNew(k)
		}
		fs[m] = o
	}
	return fs, nil
}

func closeAll(fs []*ofile) {
	for _, o := range fs {
		o.close()
	}
}

func (s *Store) size0(fs []*ofile) (int64, error) {
	var size int64
	for m, o := range fs {
		if o == nil {
			continue
		}
		l, err := o.size()
		if err != nil {
			return 0, err
		}
		size = max(size, globalEnd(m, len(fs), l))
	}
	return size, nil
}

func (s *Store) read0(k objKey, p []byte, off int64) (int, error) {
	fs, err := s.open0(k, false)
	if err != nil {
		return 0, err
	}
	defer closeAll(fs)
	if fs[0] == nil {
		return 0, s.missing(k, "read")
	}
	size, err := s.size0(fs)
	if err != nil || off >= size {
		return 0, err
	}
	n := min(int64(len(p)), size-off)
	p = p[:n]
	err = s.pieces(off, n, func(m int, loff, goff, ln int64) error {
		q := p[goff-off : goff-off+ln]
		got := 0
		if fs[m] != nil {
			var err error
			got, err = fs[m].read(q, loff)
			var bb badBlock
			if errors.As(err, &bb) {
				return s.mismatch(k, s.globalOff(m, bb.off))
			}
			if err != nil {
				return fmt.Errorf("%s: %w", s.members[m].dir, err)
			}
		}
		clear(q[got:])
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

func (s *Store) write0(k objKey, data []byte, off int64) error {
	fs, err := s.open0(k, true)
	if err != nil {
		return err
	}
	defer closeAll(fs)
	return s.pieces(off, int64(len(data)), func(m int, loff, goff, ln int64) error {
		return s.badChange0(k, m, fs[m].write(data[goff-off:goff-off+ln], loff))
	})
}

func (s *Store) truncate0(k objKey, size int64) error {
	fs, err := s.open0(k, true)
	if err != nil {
		return err
	}
	defer closeAll(fs)
	n := len(fs)
	for m, o := range fs {
		cur, err := o.size()
		if err != nil {
			return err
		}
		target := localSize(m, n, size)
		owner := size > 0 && int((size-1)/csBlock%int64(n)) == m
		if cur > target || (owner && cur != target) {
			if err := s.badChange0(k, m, o.truncate(target)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) punch0(k objKey, off, n int64) error {
	fs, err := s.open0(k, false)
	if err != nil {
		return err
	}
	if fs[0] == nil {
		return s.missing(k, "punch")
	}
	closeAll(fs)
	if fs, err = s.open0(k, true); err != nil {
		return err
	}
	defer closeAll(fs)
	return s.pieces(off, n, func(m int, loff, _, ln int64) error {
		if fs[m] == nil {
			return nil
		}
		return s.badChange0(k, m, fs[m].punch(loff, ln))
	})
}

func (s *Store) alloc0(k objKey, off, n int64) error {
	fs, err := s.open0(k, true)
	if err != nil {
		return err
	}
	defer closeAll(fs)
	return s.pieces(off, n, func(m int, loff, _, ln int64) error { return fs[m].alloc(loff, ln) })
}

// badChange0 is badChange for member m's local offsets.
func (s *Store) badChange0(k objKey, m int, err error) error {
	var bb badBlock
	if errors.As(err, &bb) {
		return s.mismatch(k, s.globalOff(m, bb.off))
	}
	return err
}

// raidErr names the member of an error.
func (s *Store) raidErr(m int, err error) error {
	if len(s.members) == 1 || err == nil {
		return err
	}
	var re *proto.RemoteError
	if errors.As(err, &re) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) {
		return proto.Errorf(syscall.ENOSPC, fmt.Sprintf("data directory %s: %v", s.members[m].dir, err))
	}
	return fmt.Errorf("data directory %s: %w", s.members[m].dir, err)
}

// ReadObject, WriteObject and SyncObject are the store's object I/O for
// in-process users (corral bench raid), with the checks requests get.
func (s *Store) ReadObject(ino uint64, idx uint32, p []byte, off int64) (int, error) {
	return s.readObj(objKey{ino, idx}, p, off)
}

func (s *Store) WriteObject(ino uint64, idx uint32, data []byte, off int64) error {
	return s.writeObj(objKey{ino, idx}, data, off)
}

func (s *Store) SyncObject(ino uint64, idx uint32) error { return s.sync(objKey{ino, idx}) }

// Degraded names the RAID-1 data directories that are not current ("":
// none, or not RAID-1).
func (s *Store) Degraded() string { return s.degraded() }
