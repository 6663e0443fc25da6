package proto

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

func header(op Op, id, n uint32) []byte {
	h := []byte{'C', 'R', Version, byte(op), 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(h[4:], id)
	binary.LittleEndian.PutUint32(h[8:], n)
	return h
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestAnnouncedFramesBoundMemory: connections that announce the largest
// frame and send nothing cost the server little: it allocates what
// arrives, not what is announced (the old ReadFrame allocated 64 MiB per
// such frame at once).
func TestAnnouncedFramesBoundMemory(t *testing.T) {
	addr, _ := startWith(t, &Server{Handler: &counting{}, Limits: Limits{Budget: 1 << 30}})
	before := heapInUse()
	const conns = 16
	for i := range conns {
		nc := authedConn(t, addr, testSec.Cred)
		nc.Write(header(OpWrite, uint32(i+1), MaxPayload))
	}
	// Sample for a while: the server has long read the headers by the end.
	var peak uint64
	for range 20 {
		time.Sleep(25 * time.Millisecond)
		peak = max(peak, heapInUse())
	}
	grown := int64(peak) - int64(before)
	if grown > 32<<20 {
		t.Fatalf("%d connections announcing %d bytes grew the heap by %d MiB", conns, MaxPayload, grown>>20)
	}
}

// TestStalledPeersDropped: a peer silent in the handshake, or stalled in a
// frame's payload, is dropped with a logged reason; others are served.
func TestStalledPeersDropped(t *testing.T) {
	addr, logs := startWith(t, &Server{Handler: &counting{}, Limits: Limits{HandshakeTimeout: 200 * time.Millisecond, PayloadTimeout: 200 * time.Millisecond}})
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	half := authedConn(t, addr, testSec.Cred)
	half.Write(append(header(OpWrite, 1, 100), 1, 2, 3))
	for name, nc := range map[string]net.Conn{"silent": silent, "half-sent frame": half} {
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if !closedByServer(nc) {
			t.Errorf("%s peer not dropped", name)
		}
	}
	waitLog(t, logs, "i/o timeout")
	waitLog(t, logs, "payload of 100 bytes not received within 200ms")
	p := Pool{Security: testSec}
	defer p.Close()
	if _, err := p.Call(context.Background(), addr, &Statfs{}); err != nil {
		t.Fatal(err)
	}
}

// blocking holds Write requests until released.
type blocking struct {
	entered chan []byte
	release chan struct{}
}

func (h *blocking) Handle(ctx context.Context, req Msg) (Msg, error) {
	if w, ok := req.(*Write); ok {
		h.entered <- w.Data
		<-h.release
	}
	return nil, nil
}

// TestBudgetBackPressure: past the byte budget the server stops reading
// (the next large request waits, unread) and still serves small requests.
func TestBudgetBackPressure(t *testing.T) {
	h := &blocking{entered: make(chan []byte, 4), release: make(chan struct{})}
	s := &Server{Handler: h, Limits: Limits{Budget: 1 << 20}}
	addr, _ := startWith(t, s)
	ctx := context.Background()
	a, b, c := Pool{Security: testSec}, Pool{Security: testSec}, Pool{Security: testSec}
	defer a.Close()
	defer b.Close()
	defer c.Close()
	big := bytes.Repeat([]byte{7}, 768<<10)
	errs := make(chan error, 2)
	go func() { _, err := a.Call(ctx, addr, &Write{Handle: 1, Data: big}); errs <- err }()
	<-h.entered
	go func() { _, err := b.Call(ctx, addr, &Write{Handle: 2, Data: big}); errs <- err }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.budget.mu.Lock()
		w := s.budget.waiting
		s.budget.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("second write never waited for budget")
		}
	}
	select {
	case <-h.entered:
		t.Fatal("second write admitted past the budget")
	default:
	}
	if _, err := c.Call(ctx, addr, &GetAttr{1}); err != nil {
		t.Fatalf("small request while the budget is held: %v", err)
	}
	close(h.release)
	if d := <-h.entered; !bytes.Equal(d, big) {
		t.Fatal("second write's data damaged")
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestPerIPLimit(t *testing.T) {
	addr, logs := startWith(t, &Server{Handler: &counting{}, Limits: Limits{PerIP: 2}})
	a := authedConn(t, addr, testSec.Cred)
	authedConn(t, addr, testSec.Cred)
	_, err := Dial(context.Background(), addr, testSec)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "is busy: 127.0.0.1 already holds 2 connections (limit 2)") {
		t.Fatalf("third connection from one address: %v", err)
	}
	waitLog(t, logs, "already holds 2 connections (limit 2)")
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := Dial(context.Background(), addr, testSec)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection after one closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleConnectionRedial: the server closes idle connections; the client
// redials transparently, also for requests that are not idempotent.
func TestIdleConnectionRedial(t *testing.T) {
	h := &counting{}
	addr, _ := startWith(t, &Server{Handler: h, Limits: Limits{IdleTimeout: 100 * time.Millisecond}})
	p := Pool{Security: testSec, PerServer: 1}
	defer p.Close()
	ctx := context.Background()
	if _, err := p.Call(ctx, addr, &Create{Parent: 1, Name: "a"}); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	c := p.conns[addr][0]
	p.mu.Unlock()
	select {
	case <-waitDead(c):
	case <-time.After(10 * time.Second):
		t.Fatal("idle connection not closed")
	}
	if _, err := p.Call(ctx, addr, &Create{Parent: 1, Name: "b"}); err != nil {
		t.Fatalf("call after idle close: %v", err)
	}
	if h.n.Load() != 2 {
		t.Errorf("handler ran %d times", h.n.Load())
	}
}

func waitDead(c *Conn) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for !c.Dead() {
			time.Sleep(5 * time.Millisecond)
		}
		close(ch)
	}()
	return ch
}

// TestGoAwayCrossingRequest: a request that crosses the server's goodbye
// was never read, so the pool resends it, though Create is not idempotent.
func TestGoAwayCrossingRequest(t *testing.T) {
	h := &counting{}
	real, _ := startWith(t, &Server{Handler: h})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		// First connection: read the request's header, then say goodbye as
		// an idle server would have just before it arrived.
		nc, err := l.Accept()
		if err != nil {
			return
		}
		if br, bw, bind, err := fakeTLS(nc); err == nil {
			if _, err := serverHandshake(br, bw, testSec.Cred, bind); err == nil {
				br.Peek(HeaderLen)
				writeHS(bw, OpGoAway, nil)
			}
		}
		nc.Close()
		// Then relay to the real server.
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", real)
			if err != nil {
				return
			}
			go func() { io.Copy(nc, up); nc.Close() }()
			go func() { io.Copy(up, nc); up.Close() }()
		}
	}()
	p := Pool{Security: testSec, PerServer: 1}
	defer p.Close()
	if _, err := p.Call(context.Background(), l.Addr().String(), &Create{Parent: 1, Name: "x"}); err != nil {
		t.Fatalf("request crossing a goodbye not resent: %v", err)
	}
	if h.n.Load() != 1 {
		t.Errorf("handler ran %d times", h.n.Load())
	}
	// The same goodbye on a lone connection names the reason.
	first := fakeServer(t, func(nc net.Conn) {
		br, bw, bind, err := fakeTLS(nc)
		if err != nil {
			return
		}
		if _, err := serverHandshake(br, bw, testSec.Cred, bind); err == nil {
			br.Peek(HeaderLen)
			writeHS(bw, OpGoAway, nil)
		}
	})
	c, err := Dial(context.Background(), first, testSec)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err = c.Call(context.Background(), &Create{Parent: 1, Name: "x"}); !errors.Is(err, errNotSent) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("goodbye: %v", err)
	}
}

// FuzzFrameSizes: any size field, with any payload bytes after it, is
// either read whole or refused; above MaxPayload always refused.
func FuzzFrameSizes(f *testing.F) {
	for _, n := range []uint32{0, 1, MaxPayload, MaxPayload + 1, 1<<32 - 1} {
		f.Add(n, []byte{1, 2, 3})
	}
	f.Fuzz(func(t *testing.T, n uint32, body []byte) {
		in := append(header(OpRead, 1, n), body...)
		_, _, payload, err := ReadFrame(bufio.NewReader(bytes.NewReader(in)))
		switch {
		case n > MaxPayload:
			if !errors.Is(err, ErrTooBig) {
				t.Fatalf("size %d: %v", n, err)
			}
		case int(n) > len(body):
			if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
				t.Fatalf("size %d with %d bytes: %v", n, len(body), err)
			}
		default:
			if err != nil || !bytes.Equal(payload, body[:n]) {
				t.Fatalf("size %d: %v", n, err)
			}
		}
	})
}

// TestClientBoundsAnnouncedReplies: a server announcing huge replies and
// sending nothing does not make the client allocate them.
func TestClientBoundsAnnouncedReplies(t *testing.T) {
	const conns = 16
	before := heapInUse()
	var cs []*Conn
	for range conns {
		addr := fakeServer(t, func(nc net.Conn) {
			br, bw, bind, err := fakeTLS(nc)
			if err != nil {
				return
			}
			if _, err := serverHandshake(br, bw, testSec.Cred, bind); err != nil {
				return
			}
			_, id, _, err := readHeader(br)
			if err != nil {
				return
			}
			bw.Write(header(OpEntries, id, MaxPayload))
			bw.Flush()
			io.Copy(io.Discard, nc)
		})
		c, err := Dial(context.Background(), addr, testSec)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	for _, c := range cs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c.Call(ctx, &Readdir{Ino: 1})
		}()
	}
	var peak uint64
	for range 20 {
		time.Sleep(25 * time.Millisecond)
		peak = max(peak, heapInUse())
	}
	if grown := int64(peak) - int64(before); grown > 32<<20 {
		t.Fatalf("%d replies announcing %d bytes grew the client's heap by %d MiB", conns, MaxPayload, grown>>20)
	}
}

// TestReadsLargerThanBudget: reads whose replies exceed the whole budget run
// one at a time instead of waiting for each other forever.
func TestReadsLargerThanBudget(t *testing.T) {
	addr, _ := startWith(t, &Server{Handler: &counting{}, Limits: Limits{Budget: 1 << 20}})
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			p := Pool{Security: testSec}
			defer p.Close()
			m, err := p.Call(context.Background(), addr, &Read{Handle: 1, Len: 4 << 20})
			if err == nil && len(m.(*DataReply).Data) != 4<<20 {
				err = errors.New("short read")
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestStrangersCostLittle: connections that never authenticate hold small
// handshake buffers only, not a member connection's 512 KiB.
func TestStrangersCostLittle(t *testing.T) {
	addr, _ := startWith(t, &Server{Handler: &counting{}})
	before := heapInUse()
	const conns = 200
	for range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write([]byte{tlsRecordHandshake, 3, 1}) // a partial TLS record: the server waits in the handshake
	}
	var peak uint64
	for range 20 {
		time.Sleep(25 * time.Millisecond)
		peak = max(peak, heapInUse())
	}
	if grown := int64(peak) - int64(before); grown > 24<<20 {
		t.Fatalf("%d unauthenticated connections grew the heap by %d MiB", conns, grown>>20)
	}
}

// TestServeAfterClose: a server closed before Serve runs (a daemon stopped
// as it starts) returns nil, as one closed while serving does, and lets go
// of the listener. It returned net.ErrClosed, which a daemon reported as a
// failure on a clean stop.
func TestServeAfterClose(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: &counting{}, Security: testSec}
	s.Close()
	if err := s.Serve(l); err != nil {
		t.Fatalf("Serve after Close: %v, want nil", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listener still open after Serve: %v", err)
	}
}
