package proto

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
)

// Handler serves one request. It runs concurrently with others, also ones
// from the same connection.
type Handler interface {
	Handle(ctx context.Context, req Msg) (Msg, error)
}

// Server accepts connections and runs a Handler for every request frame.
// A malformed frame (bad magic or version, unknown op, oversized, truncated or
// undecodable payload) closes that connection with a logged reason; the
// daemon and its other connections go on.
type Server struct {
	Handler Handler
	Log     *slog.Logger
	// MaxInflight bounds concurrent requests per connection (default 64).
	MaxInflight int

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	ls    []net.Listener
	wg    sync.WaitGroup
	done  bool
}

// Serve accepts on l until Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return net.ErrClosed
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
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		if s.conns == nil {
			s.conns = map[net.Conn]struct{}{}
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
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
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Server) serveConn(nc net.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	var handlers sync.WaitGroup
	defer func() {
		cancel()
		nc.Close()
		handlers.Wait()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	br := bufio.NewReaderSize(nc, 256<<10)
	bw := bufio.NewWriterSize(nc, 256<<10)
	var wmu sync.Mutex
	inflight := 0 // guarded by wmu: replies not yet written
	limit := s.MaxInflight
	if limit <= 0 {
		limit = 64
	}
	sem := make(chan struct{}, limit)
	for {
		op, id, payload, err := ReadFrame(br)
		if err != nil {
			if err != io.EOF && !errors.Is(err, net.ErrClosed) {
				s.log().Warn("closing connection", "remote", nc.RemoteAddr().String(), "reason", err.Error())
			}
			return
		}
		req, err := Decode(op, payload)
		if err == nil && isReply(op) {
			err = errors.New("reply op sent as a request")
		}
		if err != nil {
			s.log().Warn("closing connection", "remote", nc.RemoteAddr().String(), "reason", err.Error())
			return
		}
		sem <- struct{}{}
		wmu.Lock()
		inflight++
		wmu.Unlock()
		handlers.Add(1)
		go func() {
			defer func() { <-sem; handlers.Done() }()
			resp, herr := s.Handler.Handle(ctx, req)
			if herr != nil {
				resp = ErrorReply(herr)
			} else if resp == nil {
				resp = &OK{}
			}
			wmu.Lock()
			inflight--
			werr := WriteFrame(bw, id, resp)
			// The last reply out flushes: replies to pipelined requests
			// then share system calls.
			if werr == nil && inflight == 0 {
				werr = bw.Flush()
			}
			wmu.Unlock()
			if dr, ok := resp.(*DataReply); ok && dr.Done != nil {
				dr.Done()
			}
			if werr != nil {
				nc.Close()
			}
		}()
	}
}

func isReply(op Op) bool { return op < OpLookup }
