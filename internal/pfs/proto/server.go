package proto

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Handler serves one request. It runs concurrently with others, also ones
// from the same connection.
type Handler interface {
	Handle(ctx context.Context, req Msg) (Msg, error)
}

// Server accepts connections and runs a Handler for every request frame.
// Every connection first authenticates (see auth.go); a peer that fails is
// logged with its address and closed before any request is read. A
// malformed frame (bad magic or version, unknown op, oversized, truncated or
// undecodable payload) closes that connection with a logged reason; the
// daemon and its other connections go on.
type Server struct {
	Handler Handler
	Log     *slog.Logger
	// MaxInflight bounds concurrent requests per connection (default 64).
	MaxInflight int
	// Security holds the cluster secret (required) and optional TLS.
	Security Security
	// Limits bound memory and time spent on peers (zero: defaults).
	Limits Limits

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	perIP  map[string]int
	ls     []net.Listener
	wg     sync.WaitGroup
	done   bool
	budget *budget
}

// Serve accepts on l until Close.
func (s *Server) Serve(l net.Listener) error {
	if s.Security.Cred == nil || s.Security.Cred.Kind() != KindFull {
		l.Close()
		return errors.New("proto.Server: no cluster secret (Security.Cred must be the full secret)")
	}
	lim := s.Limits.withDefaults()
	s.mu.Lock()
	if s.done {
		// Closed before it served (a daemon stopped as it started):
		// the same as closed while serving.
		s.mu.Unlock()
		l.Close()
		return nil
	}
	if s.budget == nil {
		s.budget = newBudget(lim.Budget)
	}
	s.ls = append(s.ls, l)
	s.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.done
			s.mu.Unlock()
			if done {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		ip := hostOf(nc.RemoteAddr())
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		if s.conns == nil {
			s.conns = map[net.Conn]struct{}{}
			s.perIP = map[string]int{}
		}
		if s.perIP[ip] >= lim.PerIP {
			s.wg.Add(1)
			s.mu.Unlock()
			reason := fmt.Sprintf("%s already holds %d connections (limit %d)", ip, lim.PerIP, lim.PerIP)
			s.log().Warn("refusing connection", "remote", nc.RemoteAddr().String(), "reason", reason)
			go func() {
				defer s.wg.Done()
				bw := bufio.NewWriterSize(nc, 512)
				nc.SetDeadline(time.Now().Add(time.Second))
				refuseErrno(bw, syscall.EAGAIN, reason)
				lingerClose(nc)
			}()
			continue
		}
		s.perIP[ip]++
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc, ip, lim)
	}
}

// Close stops accepting, closes every connection and waits for handlers.
func (s *Server) Close() {
	s.mu.Lock()
	s.done = true
	for _, l := range s.ls {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	if s.budget != nil {
		s.budget.close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *Server) serveConn(raw net.Conn, ip string, lim Limits) {
	ctx, cancel := context.WithCancel(context.Background())
	var handlers sync.WaitGroup
	remote := raw.RemoteAddr().String()
	defer func() {
		cancel()
		raw.Close()
		handlers.Wait()
		s.mu.Lock()
		delete(s.conns, raw)
		if s.perIP[ip]--; s.perIP[ip] <= 0 {
			delete(s.perIP, ip)
		}
		s.mu.Unlock()
		s.wg.Done()
	}()
	if tc, ok := raw.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	raw.SetDeadline(time.Now().Add(lim.HandshakeTimeout))
	// Small buffers until the peer is authenticated: a stranger costs a
	// few KiB, not the 512 KiB of a member's connection.
	nc, hbr, hbw, bind, err := s.acceptTLS(raw)
	if err != nil {
		if err != io.EOF {
			s.log().Warn("closing connection", "remote", remote, "reason", err.Error())
		}
		if err == errPlain {
			lingerClose(raw)
		}
		return
	}
	kind, err := serverHandshake(hbr, hbw, s.Security.Cred, bind)
	if err != nil {
		s.log().Warn("closing connection", "remote", remote, "reason", "handshake: "+err.Error())
		return
	}
	nc.SetDeadline(time.Time{})
	var rd io.Reader = nc
	if n := hbr.Buffered(); n > 0 { // a request sent right behind the proof
		b, _ := hbr.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(b)), nc)
	}
	br := bufio.NewReaderSize(rd, 256<<10)
	bw := bufio.NewWriterSize(nc, 256<<10)
	ctx = context.WithValue(ctx, kindKey{}, kind)
	ctx = context.WithValue(ctx, connKey{}, connSeq.Add(1))
	var wmu sync.Mutex
	inflight := 0 // guarded by wmu: replies not yet written
	limit := s.MaxInflight
	if limit <= 0 {
		limit = 64
	}
	sem := make(chan struct{}, limit)
	for {
		// Wait for the next header. Idle (nothing in flight, nothing
		// arrived) past IdleTimeout: say goodbye and close.
		nc.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		if _, err := br.Peek(HeaderLen); err != nil {
			if isTimeout(err) {
				wmu.Lock()
				busy := inflight > 0
				wmu.Unlock()
				if busy {
					continue
				}
				if br.Buffered() == 0 {
					s.goAway(nc, bw, &wmu, &handlers)
					return
				}
				err = fmt.Errorf("stalled in a frame header for %v", lim.IdleTimeout)
			}
			if err != io.EOF && !errors.Is(err, net.ErrClosed) {
				s.log().Warn("closing connection", "remote", remote, "reason", err.Error())
			}
			return
		}
		op, id, n, err := readHeader(br)
		if err != nil {
			s.log().Warn("closing connection", "remote", remote, "reason", err.Error())
			return
		}
		// Admission: the payload's bytes come out of the server's budget
		// before they are read; waiting here is the back-pressure.
		held := s.budget.acquire(int64(n))
		if held < 0 {
			return
		}
		nc.SetReadDeadline(time.Now().Add(lim.PayloadTimeout))
		payload, err := readPayloadN(br, n)
		var req Msg
		if err == nil {
			req, err = Decode(op, payload)
		}
		if err == nil && isReply(op) {
			err = errors.New("reply op sent as a request")
		}
		if errors.Is(err, syscall.ENAMETOOLONG) {
			// The frame arrived whole and well-formed but names a path
			// over MaxString: answer that request with the error and
			// keep the connection, which other requests share (a
			// node's clients, a mount's processes). Garbage still
			// closes it.
			s.budget.release(held)
			s.log().Debug("bad request", "remote", remote, "op", op, "err", err.Error())
			wmu.Lock()
			nc.SetWriteDeadline(time.Now().Add(lim.PayloadTimeout))
			werr := WriteFrame(bw, id, ErrorReply(fmt.Errorf("bad request: %w", err)))
			if werr == nil && inflight == 0 {
				werr = bw.Flush()
			}
			wmu.Unlock()
			if werr != nil {
				return
			}
			continue
		}
		if err != nil {
			s.budget.release(held)
			if isTimeout(err) {
				err = fmt.Errorf("payload of %d bytes not received within %v", n, lim.PayloadTimeout)
			}
			s.log().Warn("closing connection", "remote", remote, "reason", err.Error())
			return
		}
		if r, ok := req.(*Read); ok {
			// Its reply's data will be in flight too. Every wait for
			// budget happens holding none (the request is a few bytes),
			// so waiting readers cannot hold each other up.
			s.budget.release(held)
			if held = s.budget.acquire(int64(n) + int64(r.Len)); held < 0 {
				return
			}
		}
		sem <- struct{}{}
		// A long poll held by the handler must not hold back the flush of
		// the replies that overtake it: it does not count as in flight.
		poll := op == OpWatch
		wmu.Lock()
		if !poll {
			inflight++
		}
		wmu.Unlock()
		handlers.Add(1)
		go func() {
			defer func() { <-sem; handlers.Done() }()
			var resp Msg
			herr := allowed(kind, op)
			if herr == nil {
				resp, herr = s.Handler.Handle(ctx, req)
			}
			if herr != nil {
				resp = ErrorReply(herr)
			} else if resp == nil {
				resp = &OK{}
			}
			wmu.Lock()
			if !poll {
				inflight--
			}
			// A peer that stops reading replies is dropped, not waited
			// for: its reply holds budget.
			nc.SetWriteDeadline(time.Now().Add(lim.PayloadTimeout))
			werr := WriteFrame(bw, id, resp)
			// The last reply out flushes: replies to pipelined requests
			// then share system calls. A long poll's answer goes at once:
			// the requests in flight may wait for what it reports.
			if werr == nil && (inflight == 0 || poll) {
				werr = bw.Flush()
			}
			wmu.Unlock()
			if dr, ok := resp.(*DataReply); ok && dr.Done != nil {
				dr.Done()
			}
			s.budget.release(held)
			if werr != nil {
				raw.Close()
			}
		}()
	}
}

// goAway tells the client that this idle connection closes and that nothing
// it sent after our last reply was read, so it may resend any request
// (even one not idempotent) on a new connection. The read side is drained
// briefly so the close does not reset the connection before the client has
// read the goodbye.
func (s *Server) goAway(nc net.Conn, bw *bufio.Writer, wmu *sync.Mutex, handlers *sync.WaitGroup) {
	handlers.Wait()
	wmu.Lock()
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	err := writeHS(bw, OpGoAway, nil)
	wmu.Unlock()
	if err != nil {
		return
	}
	lingerClose(nc)
}

// lingerClose ends our side, then reads what the peer still sends for a
// moment: closing with unread bytes would reset the connection, and the
// peer could lose what we wrote last.
func lingerClose(nc net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := nc.(closeWriter); ok {
		cw.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	io.Copy(io.Discard, io.LimitReader(nc, 1<<20))
	nc.Close()
}

// connSeq numbers authenticated connections for PeerConn.
var connSeq atomic.Uint64

type connKey struct{}

// PeerConn identifies the connection the request in ctx arrived on (0
// outside a server's handler): a handler can bound what one connection
// holds (meta's cache watchers).
func PeerConn(ctx context.Context) uint64 {
	c, _ := ctx.Value(connKey{}).(uint64)
	return c
}

func isReply(op Op) bool { return op < OpLookup }
