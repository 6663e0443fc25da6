package iod

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// loadMeter measures the I/O a server does (bytes of Read, Write and
// ReplWrite requests) as KiB/s, reported to meta with every heartbeat
// (Register.Load) so clients can spread reads over the less busy copies.
type loadMeter struct {
	bytes atomic.Uint64

	mu   sync.Mutex
	last time.Time
	seen uint64
	rate float64 // KiB/s, smoothed
}

// note counts the bytes req moves.
func (m *loadMeter) note(req proto.Msg) {
	switch r := req.(type) {
	case *proto.Read:
		m.bytes.Add(uint64(r.Len))
	case *proto.Write:
		m.bytes.Add(uint64(len(r.Data)))
	case *proto.ReplWrite:
		m.bytes.Add(uint64(len(r.Data)))
	}
}

// kibps is the load since the previous call: KiB/s over that interval,
// smoothed (half the new interval, half the past) so one burst or one
// quiet heartbeat does not swing the choice of copies.
func (m *loadMeter) kibps(now time.Time) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := m.bytes.Load()
	if m.last.IsZero() {
		m.last, m.seen = now, total
		return 0
	}
	dt := now.Sub(m.last).Seconds()
	if dt <= 0 {
		return uint32(m.rate)
	}
	cur := float64(total-m.seen) / 1024 / dt
	m.last, m.seen = now, total
	m.rate = (m.rate + cur) / 2
	if m.rate > float64(^uint32(0)) {
		return ^uint32(0)
	}
	return uint32(m.rate + 0.5)
}
