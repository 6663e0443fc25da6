package meta

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.LostAfter and Config.HealRate.
const (
	DefaultLostAfter = 30 * time.Minute
	DefaultHealRate  = 64 << 20 // bytes per second
)

const (
	healTick      = time.Second
	healChunk     = 4 << 20 // bytes per Heal request: the rate limit's grain
	healBatch     = 256     // stale records read per transaction
	healReqTimout = time.Minute
	healRetry     = 2 * time.Second // after a failed heal; a killed server restarts in about that
)

// maxHealJobs: stale records held in memory per heal pass (a variable for
// tests).
var maxHealJobs = 4096

// healer is the leader's heal and re-replication state (memory only: a
// new leader starts its figures from zero and rescans).
type healer struct {
	lostAfter time.Duration
	bucket    *tokenBucket
	tick      time.Duration
	kick      chan struct{}

	mu      sync.Mutex
	stale   map[uint32]uint64 // bytes of stale records per server, as of the last pass
	pending int               // stale records as of the last pass
	healed  map[uint32]uint64 // bytes copied per server since this member leads
	started map[uint32]time.Time
	base    map[uint32]uint64    // healed[id] when its heal started
	warned  map[string]bool      // records without a source, logged once
	retry   map[uint32]time.Time // a server whose heal failed is left alone until then
	next    []byte               // the key after which the next pass takes records
	rescan  map[uint32]time.Time // a scan that left copies without a server is repeated then
	total   atomic.Uint64
	// scanned: servers whose re-replication (lost) or rebuild (replacing)
	// scan finished, with the state it was done for.
	scanned map[uint32]uint8
	term    int64 // leaderSince the maps belong to
}

func newHealer(lostAfter time.Duration, rate int64) *healer {
	if lostAfter <= 0 {
		lostAfter = DefaultLostAfter
	}
	if rate <= 0 {
		rate = DefaultHealRate
	}
	return &healer{lostAfter: lostAfter, bucket: newTokenBucket(float64(rate)), tick: healTick, kick: make(chan struct{}, 1)}
}

// reset starts the figures afresh for a new term.
func (h *healer) reset(term int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term == term && h.stale != nil {
		return
	}
	h.term = term
	h.stale, h.healed, h.started, h.base = map[uint32]uint64{}, map[uint32]uint64{}, map[uint32]time.Time{}, map[uint32]uint64{}
	h.warned, h.scanned, h.retry = map[string]bool{}, map[uint32]uint8{}, map[uint32]time.Time{}
	h.rescan = map[uint32]time.Time{}
	h.pending = 0
	h.total.Store(0)
}

func (s *Service) kickHealer() {
	select {
	case s.hl.kick <- struct{}{}:
	default:
	}
}

// tokenBucket limits heal traffic (bytes per second over all servers). A
// take may drive it negative (a request's size is known only roughly); the
// next take waits until it is paid back.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
}

func newTokenBucket(rate float64) *tokenBucket {
	return &tokenBucket{rate: rate, burst: rate, tokens: rate, now: time.Now, sleep: sleepCtx}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take spends n bytes, waiting first while the bucket is in debt.
func (b *tokenBucket) take(ctx context.Context, n uint64) error {
	for range 1000 {
		b.mu.Lock()
		now := b.now()
		if !b.last.IsZero() {
			b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		}
		b.last = now
		if b.tokens >= 0 {
			b.tokens -= float64(n)
			b.mu.Unlock()
			return nil
		}
		wait := time.Duration(-b.tokens / b.rate * float64(time.Second))
		sleep := b.sleep
		b.mu.Unlock()
		if err := sleep(ctx, max(wait, time.Millisecond)); err != nil {
			return err
		}
	}
	return context.DeadlineExceeded
}

// healerLoop runs on every member, working while it leads: lost servers,
// re-replication, then heal of stale records.
func (s *Service) healerLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.hl.tick)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		case <-s.hl.kick:
		}
		term := s.leaderSince.Load()
		if term == 0 {
			continue
		}
		s.hl.reset(term)
		s.checkLost()
		s.rereplicate()
		s.healPass()
	}
}

// healJob is one stale record to heal.
type healJob struct {
	ino           uint64
	index, server uint32
	exts          []staleExt
	objSize       uint64
	col           []uint32
	other         map[uint32][]staleExt // the other copies' stale extents
	snap          uint64                // the last sequence number given when the job was read
}

// healPass reads every stale record (in batches), updates the figures and
// heals the records of servers that are up.
func (s *Service) healPass() {
	states := map[uint32]proto.ServerInfo{}
	for _, si := range s.servers() {
		states[si.ID] = si
	}
	stale := map[uint32]uint64{}
	pending := 0
	jobs := map[uint32][]healJob{}
	// At most maxHealJobs records are held per pass (bounded memory),
	// taken from where the last pass stopped, so that records that cannot
	// be healed yet do not hold the others back.
	s.hl.mu.Lock()
	from := s.hl.next
	s.hl.mu.Unlock()
	held := 0
	var lastJob []byte
	var after []byte
	for range 1 << 20 { // bounded: each round reads up to healBatch records
		n := 0
		s.view(func(t tx) error {
			snap := t.peekStaleSeq() - 1
			c := t.Bucket(bStale).Cursor()
			k, v := c.First()
			if after != nil {
				k, v = c.Seek(after)
				if k != nil && string(k) == string(after) {
					k, v = c.Next()
				}
			}
			for ; k != nil && n < healBatch; k, v = c.Next() {
				n++
				after = append(after[:0], k...)
				if len(k) != 16 {
					continue
				}
				j := healJob{ino: binary.BigEndian.Uint64(k), index: binary.BigEndian.Uint32(k[8:]), server: binary.BigEndian.Uint32(k[12:]), snap: snap}
				var err error
				if j.exts, err = decodeExts(v); err != nil {
					s.log.Error("heal: unreadable stale record", "ino", j.ino, "index", j.index, "server", j.server, "err", err)
					continue
				}
				ino, err := t.inode(j.ino)
				if err != nil {
					continue
				}
				if j.col, err = column(ino, j.index); err != nil {
					continue
				}
				j.objSize = uint64(replicaLayout(ino).ObjectSize(int(j.index), int64(ino.Size)))
				pending++
				stale[j.server] += staleBytes(j.exts, j.objSize)
				if si, ok := states[j.server]; !ok || (si.State != proto.ServerUp && si.State != proto.ServerFull) {
					continue
				}
				if held >= maxHealJobs || from != nil && string(k) <= string(from) {
					continue
				}
				held++
				lastJob = append(lastJob[:0], k...)
				j.other = map[uint32][]staleExt{}
				for _, id := range j.col {
					if id != j.server {
						j.other[id], _ = t.staleExts(j.ino, j.index, id)
					}
				}
				jobs[j.server] = append(jobs[j.server], j)
			}
			return nil
		})
		if n < healBatch {
			break
		}
	}
	s.hl.mu.Lock()
	s.hl.next = nil // wrap around: the next pass starts from the first record
	if held >= maxHealJobs {
		s.hl.next = lastJob
	}
	now := time.Now()
	for id, b := range stale {
		if _, ok := s.hl.started[id]; !ok && b > 0 {
			s.hl.started[id], s.hl.base[id] = now, s.hl.healed[id]
		}
	}
	for id, st := range s.hl.started {
		if stale[id] == 0 {
			s.log.Info("heal finished", "server", id, "bytes", s.hl.healed[id]-s.hl.base[id], "took", now.Sub(st).Round(time.Millisecond))
			delete(s.hl.started, id)
		}
	}
	s.hl.stale, s.hl.pending = stale, pending
	s.hl.mu.Unlock()

	var wg sync.WaitGroup
	for id, js := range jobs {
		s.hl.mu.Lock()
		wait := time.Until(s.hl.retry[id]) > 0
		s.hl.mu.Unlock()
		if wait {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, j := range js {
				if s.leaderSince.Load() == 0 {
					return
				}
				if err := s.healOne(states, j); err != nil {
					s.log.Warn("heal failed; this server's heal is retried in 2 s", "server", id, "ino", j.ino, "index", j.index, "err", err)
					s.hl.mu.Lock()
					s.hl.retry[id] = time.Now().Add(healRetry)
					s.hl.mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
}

// staleBytes counts a record's bytes, Len 0 up to the object's expected
// size.
func staleBytes(xs []staleExt, objSize uint64) uint64 {
	var n uint64
	for _, x := range xs {
		end := x.end()
		if x.Len == 0 {
			end = objSize
		}
		if end > x.Off {
			n += end - x.Off
		}
	}
	return n
}

// healPiece is one Heal request's range.
type healPiece struct {
	ext   proto.Extent
	whole bool
	size  uint64 // expected bytes
}

// pieces cuts x into requests of at most healChunk bytes; a Len 0 extent
// ends with a piece to the end of the source object.
func pieces(x staleExt, objSize uint64, whole bool) []healPiece {
	var out []healPiece
	end := x.end()
	if x.Len == 0 {
		end = max(objSize, x.Off)
	}
	off := x.Off
	for range 1 << 22 {
		if x.Len != 0 && off >= end {
			break
		}
		if x.Len == 0 && end-off <= healChunk {
			out = append(out, healPiece{proto.Extent{Off: off, Len: 0}, whole, end - off})
			break
		}
		n := min(uint64(healChunk), end-off)
		out = append(out, healPiece{proto.Extent{Off: off, Len: n}, false, n})
		off += n
	}
	return out
}

// healOne heals one record: each extent from the copies current over it,
// then clears what it healed.
func (s *Service) healOne(states map[uint32]proto.ServerInfo, j healJob) error {
	target := states[j.server]
	for _, x := range j.exts {
		var from []proto.Peer
		for _, id := range j.col {
			si, ok := states[id]
			if id == j.server || !ok || si.State != proto.ServerUp && si.State != proto.ServerFull || overlaps(j.other[id], x) {
				continue
			}
			from = append(from, proto.Peer{ID: id, Addr: si.Addr})
		}
		// The iod reads from the first that answers, so From keeps column
		// order: its first up copy is the head clients write through, which
		// applies a write before forwarding it. A backup may not have a
		// write yet that the healing copy already took, and copying from it
		// would undo that write (docs/pfs-protocol.md, Replicas).
		if len(from) == 0 {
			key := string(staleKey(j.ino, j.index, j.server))
			s.hl.mu.Lock()
			first := !s.hl.warned[key]
			s.hl.warned[key] = true
			s.hl.mu.Unlock()
			if first {
				s.log.Warn("heal: no current copy is up to heal from; waiting", "ino", j.ino, "index", j.index, "server", j.server, "copies", j.col)
			}
			return nil
		}
		// Every extent to the end sets the size (its last piece carries
		// Whole): a copy that missed a truncate is cut to the source's size,
		// else its old tail would read again once the file grows.
		for _, p := range pieces(x, j.objSize, x.Len == 0) {
			if err := s.hl.bucket.take(s.life, p.size); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(s.life, healReqTimout)
			r, err := s.pool.Call(ctx, target.Addr, &proto.Heal{Handle: j.ino, Index: j.index, Whole: p.whole, Ranges: []proto.Extent{p.ext}, From: from, Held: j.objSize})
			cancel()
			if err != nil {
				return err
			}
			var copied uint64
			if hr, ok := r.(*proto.HealReply); ok {
				copied = hr.Copied
			}
			if copied > p.size {
				if err := s.hl.bucket.take(s.life, copied-p.size); err != nil {
					return err
				}
			}
			s.hl.mu.Lock()
			s.hl.healed[j.server] += copied
			s.hl.mu.Unlock()
			s.hl.total.Add(copied)
		}
	}
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	// Cut is the job's snapshot: the clear keeps marks made since, and
	// keeps the extents a source may have lost meanwhile (clearStale).
	_, err := s.propose(ctx, &command{Kind: cmdClearStale, Ino: j.ino, Left: []uint32{j.index, j.server}, Cut: int64(min(j.snap, math.MaxInt64))})
	return err
}

// healFigures fills the servers' Stale and Healed figures (the leader's).
func (s *Service) healFigures(all []proto.ServerInfo) []proto.ServerInfo {
	s.hl.mu.Lock()
	defer s.hl.mu.Unlock()
	for i := range all {
		all[i].Stale, all[i].Healed = s.hl.stale[all[i].ID], s.hl.healed[all[i].ID]
	}
	return all
}

var (
	staleBytesDesc  = prometheus.NewDesc("corral_meta_stale_bytes", "bytes of replicas out of date on each I/O server (heal to do), as of the leader's last heal pass", []string{"server"}, nil)
	healedBytesDesc = prometheus.NewDesc("corral_meta_healed_bytes_total", "bytes copied by heal since this metadata server leads", nil, nil)
	healPendingDesc = prometheus.NewDesc("corral_meta_heal_pending", "stale records (file, column, server) waiting for heal", nil, nil)
)

type healCollector struct{ s *Service }

func (c healCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- staleBytesDesc
	ch <- healedBytesDesc
	ch <- healPendingDesc
}

func (c healCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.s.hl
	all := c.s.servers()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, si := range all {
		ch <- prometheus.MustNewConstMetric(staleBytesDesc, prometheus.GaugeValue, float64(h.stale[si.ID]), itoa(si.ID))
	}
	ch <- prometheus.MustNewConstMetric(healedBytesDesc, prometheus.CounterValue, float64(h.total.Load()))
	ch <- prometheus.MustNewConstMetric(healPendingDesc, prometheus.GaugeValue, float64(h.pending))
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
