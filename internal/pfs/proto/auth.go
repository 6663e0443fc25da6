package proto

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/corral-cluster/corral/internal/safefile"
)

// Kind is the kind of credential a peer proved in the handshake.
type Kind uint8

const (
	// KindFull is the cluster secret itself: every operation.
	KindFull Kind = 1
	// KindReadOnly is the read-only credential derived from the secret:
	// only the operations in readOnlyOps.
	KindReadOnly Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindFull:
		return "full"
	case KindReadOnly:
		return "read-only"
	}
	return fmt.Sprintf("kind %d", k)
}

// SecretEnv names the environment variable holding the path of this
// process's credential file when no --secret-file is given.
const SecretEnv = "CORRAL_SECRET_FILE"

// SecretFileName is the cluster secret's file in meta's data directory.
const SecretFileName = "cluster.secret"

const (
	keyLen   = 32
	nonceLen = 32
	// roLabel derives the read-only key from the secret: a holder of the
	// read-only key cannot recover the secret, a server holding the secret
	// can recompute the read-only key, so no extra file is needed.
	roLabel = "corral read-only credential v1"
	// Context strings keep a MAC made by one side from passing as the
	// other side's.
	ctxClient  = "corral pfs v2 handshake: client proof"
	ctxServer  = "corral pfs v2 handshake: server proof"
	filePrefix = "corral-secret"
)

// Credential is a secret a process proves knowledge of without sending it.
// A full credential (the cluster secret) also yields the read-only one.
type Credential struct {
	kind Kind
	key  [keyLen]byte
}

// NewSecret makes a fresh random cluster secret.
func NewSecret() (*Credential, error) {
	c := &Credential{kind: KindFull}
	if _, err := rand.Read(c.key[:]); err != nil {
		return nil, err
	}
	return c, nil
}

// Kind is the credential's kind.
func (c *Credential) Kind() Kind { return c.kind }

// ReadOnly derives the read-only credential; a read-only credential is its
// own read-only credential.
func (c *Credential) ReadOnly() *Credential {
	if c.kind == KindReadOnly {
		return c
	}
	m := hmac.New(sha256.New, c.key[:])
	m.Write([]byte(roLabel))
	r := &Credential{kind: KindReadOnly}
	copy(r.key[:], m.Sum(nil))
	return r
}

// keyFor is the key a peer of kind k proves: only a full credential can
// serve both kinds.
func (c *Credential) keyFor(k Kind) ([]byte, bool) {
	switch {
	case k == c.kind:
		return c.key[:], true
	case c.kind == KindFull && k == KindReadOnly:
		r := c.ReadOnly()
		return r.key[:], true
	}
	return nil, false
}

// Marshal is the credential's file text.
func (c *Credential) Marshal() []byte {
	return []byte(fmt.Sprintf("%s %s %s\n", filePrefix, c.kind, hex.EncodeToString(c.key[:])))
}

// ParseCredential reads a credential file's text.
func ParseCredential(b []byte) (*Credential, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 || f[0] != filePrefix {
		return nil, errors.New("not a corral credential (want \"corral-secret full|read-only HEX\")")
	}
	c := &Credential{}
	switch f[1] {
	case "full":
		c.kind = KindFull
	case "read-only":
		c.kind = KindReadOnly
	default:
		return nil, fmt.Errorf("unknown credential kind %q (want full or read-only)", f[1])
	}
	k, err := hex.DecodeString(f[2])
	if err != nil || len(k) != keyLen {
		return nil, fmt.Errorf("key is not %d hex-encoded bytes", keyLen)
	}
	copy(c.key[:], k)
	return c, nil
}

// ErrSecretMode means a secret file that others than its owner may read
// or write (safefile's check, as ssh refuses such a key).
var ErrSecretMode = safefile.ErrExposed

// ReadPrivate reads the secret file path, refusing it when others than
// its owner may read or write it, or when it is too big to be one.
func ReadPrivate(path string) ([]byte, error) { return safefile.ReadSecret(path) }

// LoadCredential reads a credential file (mode 0600 or stricter).
func LoadCredential(path string) (*Credential, error) {
	b, err := ReadPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	c, err := ParseCredential(b)
	if err != nil {
		return nil, fmt.Errorf("cluster secret %s: %w", path, err)
	}
	return c, nil
}

// EnsureSecretFile loads the cluster secret at path, creating it (mode 0600)
// with a fresh secret if there is none: the metadata server's first start.
func EnsureSecretFile(path string) (*Credential, error) {
	if c, err := LoadCredential(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		if err == nil && c.kind != KindFull {
			return nil, fmt.Errorf("cluster secret %s: a read-only credential, want the full secret", path)
		}
		return c, err
	}
	c, err := NewSecret()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) { // made meanwhile by another process
			return LoadCredential(path)
		}
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	_, err = f.Write(c.Marshal())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The new name must survive a power cut too, or meta would come
		// back with a fresh secret its members do not know.
		err = SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("cluster secret %s: %w", path, err)
	}
	return c, nil
}

// SyncDir makes the entries of directory dir (a file created or renamed
// in it) durable.
func SyncDir(dir string) error { return safefile.SyncDir(dir) }

// DefaultCredential is the credential named by $CORRAL_SECRET_FILE, nil if
// the variable is unset.
func DefaultCredential() (*Credential, error) {
	p := os.Getenv(SecretEnv)
	if p == "" {
		return nil, nil
	}
	return LoadCredential(p)
}

// Handshake messages (version 2). They use the frame header with request ID
// 0 and ops 10-14, and only ever appear before any request.
const (
	OpHello     Op = 10 // client: kind u8, client nonce [32]
	OpChallenge Op = 11 // server: server nonce [32]
	OpProof     Op = 12 // client: HMAC(key, ctxClient | kind | nonces) [32]
	OpWelcome   Op = 13 // server: HMAC(key, ctxServer | kind | nonces) [32]
	OpGoAway    Op = 14 // server: closing an idle connection, nothing after it was read
)

// maxHandshake bounds a handshake frame's payload: the largest is an Error
// refusal, whose message is short.
const maxHandshake = 512

var (
	// ErrAuth means the handshake failed: wrong or missing secret on either
	// side, or a peer that is not a corral server. Not retried.
	ErrAuth = errors.New("authentication failed")
	// errReadOnly is the errno of a request a read-only peer may not make.
	errReadOnly = syscall.EROFS
)

// mac is a handshake proof. bind, the TLS session's exported value (nil in
// plain text), ties the proof to the one session it was made on.
func mac(key []byte, ctx string, k Kind, nc, ns, bind []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ctx))
	m.Write([]byte{byte(k)})
	m.Write(nc)
	m.Write(ns)
	m.Write(bind)
	return m.Sum(nil)
}

func writeHS(w *bufio.Writer, op Op, payload []byte) error {
	var h [HeaderLen]byte
	h[0], h[1], h[2], h[3] = 'C', 'R', Version, byte(op)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(payload)))
	w.Write(h[:])
	w.Write(payload)
	return w.Flush()
}

// readHS reads one handshake frame: a header, then at most maxHandshake
// payload bytes (anything larger is refused before it is read).
func readHS(r *bufio.Reader) (Op, []byte, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	return decodeHSHeader(h[:], r)
}

func decodeHSHeader(h []byte, r io.Reader) (Op, []byte, error) {
	if h[0] != 'C' || h[1] != 'R' {
		if h[0] == 0x15 || h[0] == 0x16 { // TLS alert or handshake record
			return 0, nil, fmt.Errorf("%w: peer speaks TLS", ErrBadMagic)
		}
		return 0, nil, ErrBadMagic
	}
	if h[2] != Version {
		return 0, nil, fmt.Errorf("%w %d (want %d)", ErrVersion, h[2], Version)
	}
	n := binary.LittleEndian.Uint32(h[8:])
	if n > maxHandshake {
		return 0, nil, fmt.Errorf("%w: handshake frame of %d bytes (limit %d)", ErrTooBig, n, maxHandshake)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, fmt.Errorf("handshake payload of %d bytes: %w", n, noEOF(err))
	}
	return Op(h[3]), b, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseHello decodes a Hello payload: kind u8, nonce [32].
func parseHello(op Op, b []byte) (Kind, []byte, error) {
	if op != OpHello {
		return 0, nil, fmt.Errorf("expected a handshake hello, got op %d (a peer of protocol version 1?)", op)
	}
	if len(b) != 1+nonceLen {
		return 0, nil, fmt.Errorf("hello of %d bytes (want %d)", len(b), 1+nonceLen)
	}
	k := Kind(b[0])
	if k != KindFull && k != KindReadOnly {
		return 0, nil, fmt.Errorf("hello with unknown credential kind %d", b[0])
	}
	return k, b[1:], nil
}

// serverHandshake authenticates the peer on rw and returns the kind of
// credential it proved. A refused peer gets an Error frame saying why.
func serverHandshake(br *bufio.Reader, bw *bufio.Writer, cred *Credential, bind []byte) (Kind, error) {
	op, b, err := readHS(br)
	if err != nil {
		return 0, err
	}
	k, nc, err := parseHello(op, b)
	if err != nil {
		return 0, err
	}
	key, ok := cred.keyFor(k)
	if !ok {
		refuse(bw, "this server holds no "+k.String()+" credential")
		return 0, fmt.Errorf("%w: peer offered a %s credential this server cannot check", ErrAuth, k)
	}
	ns := make([]byte, nonceLen)
	if _, err := rand.Read(ns); err != nil {
		return 0, err
	}
	if err := writeHS(bw, OpChallenge, ns); err != nil {
		return 0, err
	}
	op, b, err = readHS(br)
	if err != nil {
		return 0, err
	}
	if op != OpProof || len(b) != sha256.Size {
		return 0, fmt.Errorf("expected a handshake proof, got op %d with %d bytes", op, len(b))
	}
	if !hmac.Equal(b, mac(key, ctxClient, k, nc, ns, bind)) {
		refuse(bw, "wrong cluster secret")
		return 0, fmt.Errorf("%w: wrong cluster secret (%s credential)", ErrAuth, k)
	}
	if err := writeHS(bw, OpWelcome, mac(key, ctxServer, k, nc, ns, bind)); err != nil {
		return 0, err
	}
	return k, nil
}

func refuse(bw *bufio.Writer, msg string) { refuseErrno(bw, syscall.EACCES, msg) }

// refuseErrno refuses with errno: EAGAIN says "busy, try again later" (a
// limit), which a client treats as an unreachable server, not a wrong secret.
func refuseErrno(bw *bufio.Writer, errno syscall.Errno, msg string) {
	e := Enc{}
	(&Error{Errno: uint32(errno), Msg: msg}).Encode(&e)
	writeHS(bw, OpError, e.B)
}

// clientHandshake proves cred to the server at addr and checks that the
// server knows it too.
func clientHandshake(br *bufio.Reader, bw *bufio.Writer, cred *Credential, addr string, bind []byte) error {
	if cred == nil {
		return fmt.Errorf("%w: no cluster secret to offer %s: give --secret-file FILE or set %s (meta writes DATA/%s at its first start)",
			ErrAuth, addr, SecretEnv, SecretFileName)
	}
	k := cred.kind
	nc := make([]byte, nonceLen)
	if _, err := rand.Read(nc); err != nil {
		return err
	}
	if err := writeHS(bw, OpHello, append([]byte{byte(k)}, nc...)); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, addr, err)
	}
	notServer := func(err error) error {
		if errors.Is(err, ErrBadMagic) && strings.Contains(err.Error(), "TLS") {
			return fmt.Errorf("%w: %s speaks TLS: drop --insecure", ErrAuth, addr)
		}
		if errors.Is(err, ErrBadMagic) || errors.Is(err, ErrVersion) || errors.Is(err, ErrTooBig) {
			return fmt.Errorf("%w: %s is not a corral server of protocol version %d: %v", ErrAuth, addr, Version, err)
		}
		// A server that closes without reading our hello resets the
		// connection rather than ending it.
		// Possibly passing (a server going down): unavailable, not refused.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("%w: %s closed the connection during the handshake (stopping? not a corral server of protocol version %d? expects TLS?)", ErrUnavailable, addr, Version)
		}
		return fmt.Errorf("%w: handshake with %s: %v", ErrUnavailable, addr, err)
	}
	refused := func(b []byte) error { return refusal(addr, b) }
	op, ns, err := readHS(br)
	if err != nil {
		return notServer(err)
	}
	if op == OpError {
		return refused(ns)
	}
	if op != OpChallenge || len(ns) != nonceLen {
		return fmt.Errorf("%w: %s is not a corral server: handshake op %d with %d bytes", ErrAuth, addr, op, len(ns))
	}
	if err := writeHS(bw, OpProof, mac(cred.key[:], ctxClient, k, nc, ns, bind)); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, addr, err)
	}
	op, b, err := readHS(br)
	if err != nil {
		return notServer(err)
	}
	if op == OpError {
		return refused(b)
	}
	if op != OpWelcome || !hmac.Equal(b, mac(cred.key[:], ctxServer, k, nc, ns, bind)) {
		return fmt.Errorf("%w: %s could not prove the cluster secret: not a server of this cluster", ErrAuth, addr)
	}
	return nil
}

// refusal is the error for a server's Error frame payload b in the
// handshake.
func refusal(addr string, b []byte) error {
	var m Error
	d := Dec{B: b}
	m.Decode(&d)
	msg := m.Msg
	if d.Err() != nil {
		msg = "(undecodable refusal)"
	}
	if syscall.Errno(m.Errno) == syscall.EAGAIN {
		return fmt.Errorf("%w: %s is busy: %s", ErrUnavailable, addr, msg)
	}
	return fmt.Errorf("%w: %s refused us: %s", ErrAuth, addr, msg)
}

// readOnlyOps is the allow-list of what a read-only peer may ask. Ops not
// listed, including any added later, are refused by default.
var readOnlyOps = map[Op]bool{
	OpLookup: true, OpWalk: true, OpWalkBeneath: true, OpGetAttr: true, OpReaddir: true, OpReadlink: true,
	OpStatfs: true, OpServers: true, OpRead: true, OpObjStat: true,
	OpGetXattr: true, OpListXattr: true,
	OpGetStale: true,                  // readers choose a current replica
	OpWatch:    true, OpUnwatch: true, // a read-only client caches metadata too
}

type kindKey struct{}

// PeerKind is the credential kind the peer of the request in ctx proved
// (0 outside a server's handler), for checks finer than the allow-list.
func PeerKind(ctx context.Context) Kind {
	k, _ := ctx.Value(kindKey{}).(Kind)
	return k
}

// allowed refuses a request a read-only peer may not make.
func allowed(k Kind, op Op) error {
	if k == KindFull || readOnlyOps[op] {
		return nil
	}
	return Errorf(errReadOnly, fmt.Sprintf("%s refused: this client holds the read-only credential", opName(op)))
}
