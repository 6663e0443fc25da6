package replog

import (
	"time"

	"github.com/corral-cluster/corral/internal/obs"
	"github.com/prometheus/client_golang/prometheus"
)

// The replicated log's timings, one set per process (a daemon runs one
// log; tests that run several in one process see their sum). A metadata
// member registers them with its /metrics (Collectors).
var (
	walFsync = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corral_replog_wal_fsync_seconds",
		Help:    "time of one fsync of the Raft log (one per Ready batch that must be durable)",
		Buckets: obs.LatencyBuckets})
	commitWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corral_replog_commit_seconds",
		Help:    "on the leader, time from a batch of commands being proposed to Raft until it is committed (written and fsynced on a quorum)",
		Buckets: obs.LatencyBuckets})
	applyTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corral_replog_apply_seconds",
		Help:    "time of one state machine Apply (one store transaction for a run of committed commands, its fsync included)",
		Buckets: obs.LatencyBuckets})
	walBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_replog_wal_bytes_total",
		Help: "bytes appended to the Raft log (entries, hard states, snapshot markers)"})
	applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_replog_commands_applied_total",
		Help: "commands applied to the state machine (all members count theirs)"})
	queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corral_replog_propose_wait_seconds",
		Help:    "on the leader, time a command waits in the proposal queue before its batch is proposed to Raft (group commit)",
		Buckets: obs.LatencyBuckets})
)

// Collectors are the log's metrics, for a daemon's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{walFsync, walBytes, commitWait, applyTime, applied, queueWait}
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }
