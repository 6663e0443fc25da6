package xdp

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// The connection table in address terms, for high availability
// (internal/ha): a standby or a peer director holds another director's
// flows by client, VIP and real server address, never by local ids (service
// ids and slots differ between directors).

// ConnState is a flow's state as the table keeps it.
type ConnState uint8

const (
	StateEstablished ConnState = 1 // TCP, no FIN or RST seen from the client
	StateFin         ConnState = 2 // TCP after the client's FIN or RST
	StateUDP         ConnState = 3
)

// Conn is one flow in address terms.
type Conn struct {
	Client netip.AddrPort // the client's address and port
	VIP    netip.AddrPort // the service's VIP and port
	Proto  string         // "tcp" or "udp"
	Real   netip.Addr     // the real server the flow goes to
	State  ConnState
	// Idle is the time since the flow's last packet (whole seconds); an
	// imported flow keeps it, so that it expires when it would have on the
	// director it came from.
	Idle time.Duration
}

// EventOp says what happened to a flow.
type EventOp uint8

const (
	OpNew    EventOp = 1 // scheduled (or imported): the flow now goes to Conn.Real
	OpUpdate EventOp = 2 // state changed (the client's FIN or RST)
	OpDelete EventOp = 3 // ended: expired, or replaced by a new flow on the same ports
)

// ConnEvent is one change of the connection table.
type ConnEvent struct {
	Op   EventOp
	Conn Conn
}

// HAMode says when the program forwards VIP traffic.
type HAMode uint32

const (
	// HAOff: always (a single director).
	HAOff HAMode = 0
	// HAFenced: only while the fence is open (CLOCK_MONOTONIC below the
	// deadline given to SetHA), and it answers ARP for the VIPs set with
	// SetARP only then; unknown non-SYN TCP flows are scheduled through
	// the service's Maglev table. A director that stops renewing (frozen,
	// partitioned) stops forwarding in the kernel by itself.
	HAFenced HAMode = 1
	// HAActiveActive: always, without ARP (a router spreads flows over the
	// directors); unknown non-SYN TCP flows go through the Maglev table.
	HAActiveActive HAMode = 2
)

// ErrNotYet is returned by the stubs below until the dataplane carries them.
var ErrNotYet = errors.New("xdp: not implemented yet")

// MonoNow is CLOCK_MONOTONIC, the clock the program's fence compares
// against (bpf_ktime_get_ns).
func MonoNow() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// SetHA sets when the program forwards: mode, and for HAFenced the
// CLOCK_MONOTONIC deadline (0 closes the fence at once).
func (d *Dataplane) SetHA(mode HAMode, until time.Duration) error { return ErrNotYet }

// SetARP names the VIPs the program answers ARP requests for (HAFenced,
// fence open), with mac as the answer (the attached interface's MAC).
func (d *Dataplane) SetARP(mac net.HardwareAddr, vips []netip.Addr) error { return ErrNotYet }

// ExportConns returns every flow of the table in address terms (flows of
// services or servers the table no longer has are left out).
func (d *Dataplane) ExportConns() ([]Conn, error) { return nil, ErrNotYet }

// ApplyConns applies changes another director made: OpNew and OpUpdate
// insert or overwrite the flow (the servers' connection counts follow),
// OpDelete removes it. A change naming a service or real server this
// director does not have is skipped and counted.
func (d *Dataplane) ApplyConns(evs []ConnEvent) (applied, skipped int, err error) {
	return 0, len(evs), ErrNotYet
}

// Events streams the changes this director's program makes (new flows,
// FIN/RST, and the expiries and reuses the Go side does), in batches.
// Changes written by ApplyConns are not repeated here.
type Events struct {
	C <-chan []ConnEvent
}

// Lost counts changes the kernel could not queue (ring buffer full): a
// peer that missed them needs a full resync.
func (e *Events) Lost() uint64 { return 0 }

// Close stops the stream and closes C.
func (e *Events) Close() error { return nil }

// StartEvents starts the stream; there is one per dataplane.
func (d *Dataplane) StartEvents() (*Events, error) { return nil, ErrNotYet }
