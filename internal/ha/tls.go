package ha

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Sync streams speak TLS 1.3 unless Config.Insecure. As on the file-system
// protocol, trust comes from the group key, not from certificates: a
// listener presents a throwaway certificate, a dialer does not check it,
// and the Auth MACs cover a value exported from the TLS session, so only
// holders of the key can finish a handshake over one session and a relay
// in the middle (two sessions) fails on both sides. Liveness probes
// (probeOnce) stay plain text: they carry no secret and a TLS handshake
// would not fit their 100 ms.

// syncBindingLabel names the exported value the Auth MACs cover.
const syncBindingLabel = "EXPORTER-corral-ha-sync-v1"

// errPlainSync refuses a plain-text stream on a listener that requires TLS.
var errPlainSync = errors.New("ha: plain-text sync stream refused: this director requires TLS (the peer runs with --insecure?)")

// secureDial starts TLS on a dialed stream; the binding is nil in plain text.
func (n *Node) secureDial(conn net.Conn) (net.Conn, []byte, error) {
	if n.cfg.Insecure {
		return conn, nil, nil
	}
	conn.SetDeadline(time.Now().Add(ioDeadline))
	defer conn.SetDeadline(time.Time{})
	tc := tls.Client(conn, proto.BoundClientTLS())
	if err := tc.Handshake(); err != nil {
		return nil, nil, fmt.Errorf("ha: TLS with %s: %w (a peer of an older version, or one given --insecure?)", conn.RemoteAddr(), err)
	}
	b, err := proto.TLSBinding(tc, syncBindingLabel)
	if err != nil {
		return nil, nil, fmt.Errorf("ha: TLS with %s: %w", conn.RemoteAddr(), err)
	}
	return tc, b, nil
}

// peekedConn is a connection whose first bytes were peeked into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// secureAccept tells TLS from plain text by the peer's first byte and
// starts TLS. plain reports a plain-text peer (bind nil).
func (n *Node) secureAccept(conn net.Conn) (c net.Conn, bind []byte, plain bool, err error) {
	conn.SetDeadline(time.Now().Add(ioDeadline))
	defer conn.SetDeadline(time.Time{})
	br := bufio.NewReaderSize(conn, 512)
	first, err := br.Peek(1)
	if err != nil {
		return nil, nil, false, err
	}
	pc := peekedConn{conn, br}
	if first[0] != proto.TLSRecordHandshake {
		return pc, nil, true, nil
	}
	cfg, err := proto.EphemeralServerTLS()
	if err != nil {
		return nil, nil, false, err
	}
	tc := tls.Server(pc, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, nil, false, fmt.Errorf("ha: TLS from %s: %w", conn.RemoteAddr(), err)
	}
	if bind, err = proto.TLSBinding(tc, syncBindingLabel); err != nil {
		return nil, nil, false, fmt.Errorf("ha: TLS from %s: %w", conn.RemoteAddr(), err)
	}
	return tc, bind, false, nil
}
