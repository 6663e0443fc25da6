package replog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// counter is a toy state machine: each command adds its byte to a sum.
type counter struct {
	mu      sync.Mutex
	sum     uint64
	applied uint64
	batches int
}

func (c *counter) Apply(first uint64, cmds [][]byte) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if first != c.applied+1 {
		return nil, errors.New("gap in the log")
	}
	out := make([][]byte, len(cmds))
	for i, cmd := range cmds {
		c.sum += uint64(cmd[0])
		out[i] = binary.LittleEndian.AppendUint64(nil, c.sum)
	}
	c.applied += uint64(len(cmds))
	c.batches++
	return out, nil
}
func (c *counter) Applied() uint64 { c.mu.Lock(); defer c.mu.Unlock(); return c.applied }
func (c *counter) Snapshot(w io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.Write(w, binary.LittleEndian, [2]uint64{c.sum, c.applied})
}
func (c *counter) Restore(r io.Reader) error {
	var v [2]uint64
	if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
		return err
	}
	c.mu.Lock()
	c.sum, c.applied = v[0], v[1]
	c.mu.Unlock()
	return nil
}

func TestSingleGroupsAndOrders(t *testing.T) {
	c := &counter{}
	s := NewSingle(c, "127.0.0.1:1")
	defer s.Close()
	var wg sync.WaitGroup
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Propose(context.Background(), []byte{1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if c.sum != 500 || c.applied != 500 {
		t.Fatalf("sum %d applied %d, want 500", c.sum, c.applied)
	}
	if c.batches >= 500 {
		t.Errorf("%d batches for 500 concurrent proposals: no group commit", c.batches)
	}
	st := s.Status()
	if !st.IsLeader() || st.Applied != 500 || st.LeaderAddr() != "127.0.0.1:1" {
		t.Errorf("status %+v", st)
	}
	var buf bytes.Buffer
	if err := c.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	c2 := &counter{}
	if err := c2.Restore(&buf); err != nil || c2.sum != 500 {
		t.Fatalf("restore: %v sum %d", err, c2.sum)
	}
}

func TestSingleCloseNeverHangs(t *testing.T) {
	s := NewSingle(&counter{}, "")
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.Propose(context.Background(), []byte{1}) }()
	}
	s.Close()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Propose hangs after Close")
	}
	if _, err := s.Propose(context.Background(), []byte{1}); !errors.Is(err, ErrStopped) {
		t.Fatalf("after Close: %v, want ErrStopped", err)
	}
	if err := s.ChangeMember(context.Background(), MemberChange{Op: AddMember}); err == nil {
		t.Fatal("single engine accepted a member change")
	}
}

// picky fails to apply a command 0xff (one it cannot understand).
type picky struct{ counter }

func (p *picky) Apply(first uint64, cmds [][]byte) ([][]byte, error) {
	for _, c := range cmds {
		if c[0] == 0xff {
			return nil, errors.New("command 0xff not understood")
		}
	}
	return p.counter.Apply(first, cmds)
}

// TestSingleHaltsOnApplyError: a command the state machine cannot apply is
// not skipped: it and everything after fail, nothing more applies.
func TestSingleHaltsOnApplyError(t *testing.T) {
	p := &picky{}
	s := NewSingle(p, "127.0.0.1:1")
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Propose(ctx, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Propose(ctx, []byte{0xff}); err == nil {
		t.Fatal("a command the state machine refused was answered")
	}
	if _, err := s.Propose(ctx, []byte{2}); err == nil || p.Applied() != 1 {
		t.Fatalf("after the halt: propose gave %v, applied %d; want an error and 1", err, p.Applied())
	}
	if err := s.ReadBarrier(ctx); err == nil {
		t.Fatal("read barrier of a halted engine succeeded")
	}
}
