package replog

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Raft traffic between members goes over the metadata protocol (so it is
// authenticated by the cluster secret): proto.Raft carries a batch of
// messages to one member, proto.RaftSnap the chunks of a state machine
// snapshot for a member too far behind for the log. One sender goroutine
// per member: messages queued while a call is in flight go in the next
// call.

const (
	peerQueue     = 4096
	maxSendBytes  = 8 << 20
	snapCallLimit = 30 * time.Second
	maxRecv       = 4 // snapshot transfers received at once
)

// snapChunk is the data of one RaftSnap (a variable: tests make it small
// to cross chunk boundaries).
var snapChunk = 4 << 20

type peerSender struct {
	r    *Raft
	id   uint64
	q    chan raftpb.Message
	quit chan struct{}
	once sync.Once
}

func (p *peerSender) stop() { p.once.Do(func() { close(p.quit) }) }

// peer returns the sender to member id, starting it (r.mu held).
func (r *Raft) peerLocked(id uint64) *peerSender {
	p := r.peers[id]
	if p == nil {
		p = &peerSender{r: r, id: id, q: make(chan raftpb.Message, peerQueue), quit: make(chan struct{})}
		r.peers[id] = p
		r.wg.Add(1)
		go p.loop()
	}
	return p
}

// send queues messages for their members; a full queue means the member
// does not keep up: Raft is told it is unreachable and probes again later.
func (r *Raft) send(msgs []raftpb.Message) {
	for _, m := range msgs {
		if m.To == r.cfg.ID {
			continue
		}
		if m.Type == raftpb.MsgTimeoutNow {
			// A leadership transfer: the target's election overrides
			// the others' refusal to vote within a leader's lease, so
			// the lease ends before the target hears of it.
			r.revokeLease(m.Term)
		}
		if m.Type == raftpb.MsgSnap {
			r.wg.Add(1)
			go r.sendSnapshot(m)
			continue
		}
		r.mu.Lock()
		p := r.peerLocked(m.To)
		r.mu.Unlock()
		select {
		case p.q <- m:
		default:
			r.node.ReportUnreachable(m.To)
		}
	}
}

func (p *peerSender) loop() {
	r := p.r
	defer r.wg.Done()
	for {
		var batch []raftpb.Message
		select {
		case m := <-p.q:
			batch = append(batch, m)
		case <-p.quit:
			return
		case <-r.done:
			return
		}
		size := batch[0].Size()
	drain:
		for size < maxSendBytes {
			select {
			case m := <-p.q:
				batch = append(batch, m)
				size += m.Size()
			default:
				break drain
			}
		}
		addr := r.addrOf(p.id)
		if addr == "" {
			r.node.ReportUnreachable(p.id)
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, time.Duration(electionTicks)*r.cfg.Tick)
		_, err := r.cfg.Transport.Call(ctx, addr, &proto.Raft{Data: r.encodeMsgs(batch)})
		cancel()
		if err != nil {
			r.node.ReportUnreachable(p.id)
			r.log.Debug("raft messages not delivered", "to", p.id, "addr", addr, "n", len(batch), "err", err)
		}
	}
}

// encodeMsgs: [u64 sender ID][str sender address][u32 n]([bytes msg])*n.
// The sender's address lets a member that joined learn where to answer
// before the log tells it.
func (r *Raft) encodeMsgs(ms []raftpb.Message) []byte {
	e := proto.Enc{}
	e.U64(r.cfg.ID)
	e.Str(r.cfg.Addr)
	e.U32(uint32(len(ms)))
	for i := range ms {
		b, _ := ms[i].Marshal()
		e.Bytes(b)
	}
	return e.B
}

func decodeMsgs(b []byte) (from uint64, addr string, ms []raftpb.Message, err error) {
	d := proto.Dec{B: b}
	from, addr = d.U64(), d.Str()
	ms = make([]raftpb.Message, d.Count(4))
	for i := range ms {
		if err := ms[i].Unmarshal(d.Bytes()); err != nil && d.Err() == nil {
			return 0, "", nil, fmt.Errorf("raft message %d of %d: %w", i+1, len(ms), err)
		}
	}
	if err := d.Err(); err != nil {
		return 0, "", nil, fmt.Errorf("raft messages: %w", err)
	}
	return from, addr, ms, nil
}

// Handle serves the Raft traffic (proto.Raft, proto.RaftSnap) a member
// receives; ok is false for any other request. The metadata service passes
// every request through it first.
func (r *Raft) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error, bool) {
	switch m := req.(type) {
	case *proto.Raft:
		return r.handleRaft(ctx, m), nil, true
	case *proto.RaftSnap:
		if err := r.handleSnapChunk(ctx, m); err != nil {
			return nil, err, true
		}
		return &proto.OK{}, nil, true
	}
	return nil, nil, false
}

func (r *Raft) handleRaft(ctx context.Context, m *proto.Raft) proto.Msg {
	from, addr, ms, err := decodeMsgs(m.Data)
	if err != nil {
		r.log.Warn("undecodable raft traffic dropped", "err", err)
		return &proto.OK{}
	}
	if from != 0 && from != r.cfg.ID && addr != "" {
		r.mu.Lock()
		if r.addrs[from] == "" {
			r.addrs[from] = addr
		}
		r.mu.Unlock()
	}
	for _, msg := range ms {
		if msg.To != r.cfg.ID {
			continue // meant for a member that had this address before
		}
		if r.holdVote(msg) {
			continue
		}
		if err := r.node.Step(ctx, msg); err != nil {
			break // stopped or ctx done: the sender retries through Raft
		}
	}
	return &proto.OK{}
}

type snapRecv struct {
	f   *os.File
	off uint64
}

var snapMu sync.Mutex // serialises writes of received chunks (across engines in one process: rare)

func (r *Raft) handleSnapChunk(ctx context.Context, m *proto.RaftSnap) error {
	snapMu.Lock()
	r.mu.Lock()
	s := r.recv[m.Token]
	if s == nil {
		if m.Offset != 0 {
			r.mu.Unlock()
			snapMu.Unlock()
			return fmt.Errorf("snapshot transfer %x: chunk at %d of a transfer not started here", m.Token, m.Offset)
		}
		if len(r.recv) >= maxRecv {
			r.mu.Unlock()
			snapMu.Unlock()
			return fmt.Errorf("snapshot transfer %x refused: %d already in progress", m.Token, maxRecv)
		}
		f, err := os.CreateTemp(r.cfg.Dir, "snap-recv-*")
		if err != nil {
			r.mu.Unlock()
			snapMu.Unlock()
			return err
		}
		s = &snapRecv{f: f}
		r.recv[m.Token] = s
	}
	r.mu.Unlock()
	drop := func(err error) error {
		r.mu.Lock()
		delete(r.recv, m.Token)
		r.mu.Unlock()
		s.f.Close()
		os.Remove(s.f.Name())
		snapMu.Unlock()
		return err
	}
	if m.Offset != s.off {
		return drop(fmt.Errorf("snapshot transfer %x: chunk at %d, expected %d", m.Token, m.Offset, s.off))
	}
	if _, err := s.f.Write(m.Data); err != nil {
		return drop(fmt.Errorf("snapshot transfer %x: %w", m.Token, err))
	}
	s.off += uint64(len(m.Data))
	if !m.Last {
		snapMu.Unlock()
		return nil
	}
	var msg raftpb.Message
	if err := msg.Unmarshal(m.Msg); err != nil || msg.Type != raftpb.MsgSnap || msg.To != r.cfg.ID {
		return drop(fmt.Errorf("snapshot transfer %x: its last chunk does not carry a snapshot message for member %d", m.Token, r.cfg.ID))
	}
	if err := s.f.Sync(); err != nil {
		return drop(err)
	}
	path := filepath.Join(r.cfg.Dir, fmt.Sprintf("snap-%016x", msg.Snapshot.Metadata.Index))
	s.f.Close()
	if err := os.Rename(s.f.Name(), path); err != nil {
		return drop(err)
	}
	if err := durable.SyncDir(r.cfg.Dir); err != nil {
		return drop(err)
	}
	r.mu.Lock()
	delete(r.recv, m.Token)
	r.received[msg.Snapshot.Metadata.Index] = path
	r.mu.Unlock()
	snapMu.Unlock()
	return r.node.Step(ctx, msg)
}

// sendSnapshot streams the state machine to a member the log cannot catch
// up: Snapshot runs while Apply goes on; the image may be newer than the
// Raft snapshot's index, which the receiver handles by skipping commands it
// holds.
func (r *Raft) sendSnapshot(m raftpb.Message) {
	defer r.wg.Done()
	addr := r.addrOf(m.To)
	fail := func(err error) {
		r.log.Warn("snapshot to a lagging member failed; Raft will retry", "to", m.To, "addr", addr, "err", err)
		r.node.ReportSnapshot(m.To, raft.SnapshotFailure)
	}
	if addr == "" {
		fail(errors.New("address unknown"))
		return
	}
	msgBytes, err := m.Marshal()
	if err != nil {
		fail(err)
		return
	}
	var tb [8]byte
	rand.Read(tb[:])
	token := binary.LittleEndian.Uint64(tb[:])
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(r.sm.Snapshot(pw)) }()
	defer pr.Close()
	buf := make([]byte, snapChunk)
	var off uint64
	for {
		n, err := io.ReadFull(pr, buf)
		last := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !last {
			fail(fmt.Errorf("taking the snapshot: %w", err))
			return
		}
		c := &proto.RaftSnap{Token: token, Offset: off, Data: buf[:n], Last: last}
		if last {
			c.Msg = msgBytes
		}
		ctx, cancel := context.WithTimeout(r.ctx, snapCallLimit)
		_, err = r.cfg.Transport.Call(ctx, addr, c)
		cancel()
		if err != nil {
			fail(err)
			return
		}
		if r.stopped() {
			return
		}
		off += uint64(n)
		if last {
			break
		}
	}
	r.log.Info("snapshot sent to a lagging member", "to", m.To, "index", m.Snapshot.Metadata.Index, "bytes", off)
	r.node.ReportSnapshot(m.To, raft.SnapshotFinish)
}
