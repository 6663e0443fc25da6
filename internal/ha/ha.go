// Package ha makes several directors one: election of the active director
// per VIP group through an etcd lease (so that two can never forward for one
// VIP), the VIPs' takeover (the fence in the XDP program, ARP answered by it,
// gratuitous ARP and unsolicited neighbour advertisements), and the
// connection table streamed to the other directors in address terms, so
// that established flows survive a fail-over, a fail-back and a handover.
// In active-active mode every director forwards (a router spreads flows over
// them by ECMP) and each streams its own new flows to the others.
package ha

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

// Modes.
const (
	ActiveStandby = "active-standby"
	ActiveActive  = "active-active"
)

// Config is one director's part in a group.
type Config struct {
	// Name is this director's name in the group (unique in it).
	Name string
	// Group names the VIP set; the directors of one group elect one active
	// (active-standby) or all forward (active-active).
	Group string
	// Mode is ActiveStandby (default) or ActiveActive.
	Mode string
	// Priority: the in-sync director with the highest takes the VIPs back
	// (fail-back); equal priorities do not preempt. Default 100.
	Priority int
	// Etcd is the management station's etcd (client URLs); EtcdTLS, if
	// set, its client TLS (the station's CA, a client certificate).
	Etcd    []string
	EtcdTLS *tls.Config
	// LeaseTTL is the election lease's TTL (whole seconds, at least 1 s;
	// etcd may raise it). Default 2 s.
	LeaseTTL time.Duration
	// SyncListen is where this director takes peers' connection streams
	// (address:port on the director's link); it is advertised to the
	// group through etcd.
	SyncListen string
	// Key is the group's shared secret: peers prove they hold it before a
	// stream is accepted. At least 16 bytes.
	Key []byte
	// Insecure: dial peers in plain text and accept plain-text peers
	// besides TLS ones. Without it every stream is TLS 1.3, authenticated
	// by Key bound to the TLS session (tls.go).
	Insecure bool
	// Interface and MAC are the link the VIPs live on (gratuitous ARP goes
	// out there) and its address; VIPs are the group's addresses.
	Interface string
	MAC       net.HardwareAddr
	VIPs      []netip.Addr
	Log       *slog.Logger
}

// Dataplane is what ha drives: the director's XDP program.
type Dataplane interface {
	// SetHA opens, renews or closes the fence (xdp.Dataplane.SetHA).
	SetHA(mode xdp.HAMode, until time.Duration) error
	// ExportConns / ApplyConns: the table in address terms.
	ExportConns() ([]xdp.Conn, error)
	ApplyConns(evs []xdp.ConnEvent) (applied, skipped int, err error)
	// Changes are this director's own changes, batched (xdp.Events.C);
	// Lost counts those the kernel dropped (peers then resync).
	Changes() <-chan []xdp.ConnEvent
	Lost() uint64
}

// States of a director.
const (
	StateStarting = "starting" // not yet registered in etcd
	StateSyncing  = "syncing"  // receiving a full table; may not become active
	StateStandby  = "standby"  // in sync, ready to take over
	StateActive   = "active"   // forwarding (active-standby: holds the election)
	StateFenced   = "fenced"   // lost the etcd lease or etcd: not forwarding
)

// Status is what `corral ctl ha` shows.
type Status struct {
	Name     string `json:"name"`
	Group    string `json:"group"`
	Mode     string `json:"mode"`
	State    string `json:"state"`
	Priority int    `json:"priority"`
	// Active is the director holding the election ("" when none).
	Active string `json:"active"`
	// LeaseTTL and FenceLeft: how long the lease lasts, and how long this
	// director may still forward without another renewal.
	LeaseTTL       time.Duration `json:"lease_ttl"`
	FenceLeft      time.Duration `json:"fence_left"`
	LastTransition time.Time     `json:"last_transition"`
	LastReason     string        `json:"last_reason"`
	Transitions    uint64        `json:"transitions"`
	SyncErrors     uint64        `json:"sync_errors"`
	Resyncs        uint64        `json:"resyncs"`
	Peers          []PeerStatus  `json:"peers"`
}

// PeerStatus is one other director of the group, as this one sees it.
type PeerStatus struct {
	Name     string `json:"name"`
	Sync     string `json:"sync"` // its sync address
	State    string `json:"state"`
	Priority int    `json:"priority"`
	// Out is this director's stream to the peer: sent, acknowledged and the
	// age of the oldest change not yet acknowledged (the sync lag).
	OutConnected bool          `json:"out_connected"`
	OutSent      uint64        `json:"out_sent"`
	OutAcked     uint64        `json:"out_acked"`
	Lag          time.Duration `json:"lag"`
	// In is the peer's stream to this director: whether a full table has
	// been received and the changes applied since.
	InConnected bool   `json:"in_connected"`
	InSynced    bool   `json:"in_synced"`
	InApplied   uint64 `json:"in_applied"`
	InSkipped   uint64 `json:"in_skipped"`
}
