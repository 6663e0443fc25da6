package proto

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// samples has one filled-in value of every message type.
func samples() []Msg {
	a := Attr{Ino: 7, Mode: 0o100644, Uid: 1, Gid: 2, Nlink: 1, Size: 1 << 40, Atime: 1, Mtime: -2, Ctime: 3,
		StripeSize: 65536, StripeCount: 3, Servers: []uint32{1, 2, 3}, Replicas: 2, Extra: []uint32{2, 3, 1}, Placement: PlaceStriped, Stale: 1}
	return []Msg{
		&OK{}, &Error{Errno: 2, Msg: "x: no such file"}, &AttrReply{Attr: a, Created: true},
		&EntriesReply{Entries: []Entry{{Name: "a", Attr: a}, {Name: "bb", Attr: Attr{Servers: []uint32{}, Extra: []uint32{}}}}, More: true},
		&TargetReply{Target: "../t"}, &StatfsReply{1, 2, 3, 4},
		&ServersReply{Servers: []ServerInfo{{1, "127.0.0.1:1", 5, 6, 7, ServerLost, 12, "z1", 8, 9, 10}}, Cluster: "c1"},
		&DataReply{Data: []byte("hello")}, &SizeReply{Size: 9},
		&Lookup{1, "n"}, &Walk{"/a/b"}, &GetAttr{3}, &SetAttr{1, SetSize | SetMode, 0o755, 1, 2, 3, 4, 5},
		&Create{1, "f", 0o644, 1, 2, true, 65536, 2, 3, 0, 0}, &Create{Parent: 1, Name: "g", Excl: true, Reserved: 9, Size: 4096}, &Create{Parent: 1, Name: "h", Reserved: 9},
		&Reserve{Parent: 1, Count: 64}, &ReserveReply{Until: 5, Files: []Attr{a, {Ino: 8, Mode: 0o100000, Servers: []uint32{2}, Extra: []uint32{}}}}, &ReserveReply{},
		&Mkdir{1, "d", 0o755, 0, 0},
		&Symlink{1, "l", "/t", 0, 0}, &Link{5, 1, "h"}, &Unlink{1, "u"}, &Rmdir{1, "r"},
		&Rename{1, "a", 2, "b", RenameNoReplace}, &Readdir{1, "m", 100}, &Readlink{4},
		&SetLayout{1, 1 << 20, 4, 2, PlaceWhole}, &Statfs{}, &Register{1, "127.0.0.11:7410", 100, 50, "c1", true, "z", 5}, &Servers{},
		&ReplaceServer{2}, &RefCheck{2, []ObjRef{{5, 1}, {6, AnyIndex}}}, &RefsReply{[]bool{true, false}},
		&ListObjects{true, ObjRef{5, 1}, 100}, &ObjectsReply{[]ObjectInfo{{ObjRef{5, 1}, 10, 11}}, true}, &Identify{},
		&Read{1, 2, 3, 4, 0}, &Read{1, 2, 3, 4, 1 << 20}, &Write{1, 2, 3, []byte("data")}, &Truncate{1, 2, 9}, &Sync{1, 2}, &Remove{1, 2}, &ObjStat{1, 2},
		&Members{}, &MembersReply{1, 2, 3, 40, 39, []MemberInfo{{1, "127.0.0.1:7400", false, 40, true}, {4, "127.0.0.4:7400", true, 7, false}}},
		&MemberChange{MemberAdd, 4, "127.0.0.4:7400"}, &Backup{9, 1 << 20}, &BackupReply{9, 1 << 20, 3 << 20, []byte("img"), true},
		&RaftSnap{7, 0, []byte("state"), true, []byte("msg")}, &Raft{Data: []byte{1, 2, 3}},
		&Watch{Client: 9, Since: 5, Epoch: 3}, &Unwatch{Client: 9}, &ChangesReply{Index: 7, Epoch: 3, Reset: true, Inos: []uint64{1, 1 << 40}},
	}
}

func TestRoundTrip(t *testing.T) {
	seen := map[Op]bool{}
	for _, m := range append(append(append(samples(), posixSamples()...), idemSamples()...), redundancySamples()...) {
		seen[m.Op()] = true
		var buf bytes.Buffer
		if err := WriteFrame(&buf, 42, m); err != nil {
			t.Fatal(err)
		}
		op, id, payload, err := ReadFrame(bufio.NewReader(&buf))
		if err != nil || op != m.Op() || id != 42 {
			t.Fatalf("%T: op %d id %d err %v", m, op, id, err)
		}
		got, err := Decode(op, payload)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%T: got %+v want %+v", m, got, m)
		}
		// Every strict prefix of a payload is rejected, never accepted or panicking.
		for i := 0; i < len(payload); i++ {
			if r, ok := m.(*Read); ok && r.Held != 0 && i == 24 {
				continue // a Read without Held: the older form, valid
			}
			if w, ok := m.(*ReplWrite); ok && w.Sync && i == len(payload)-1 {
				continue // without the sync flag: valid
			}
			if c, ok := m.(*Create); ok && c.Reserved != 0 && (i == len(payload)-8 || c.Size != 0 && i == len(payload)-16) {
				continue // without the optional trailing fields: valid
			}
			if _, err := Decode(op, payload[:i]); err == nil && len(payload) > 0 {
				t.Errorf("%T: prefix of %d/%d bytes decoded", m, i, len(payload))
			}
		}
		if _, err := Decode(op, append(payload, 0)); err == nil {
			t.Errorf("%T: trailing byte accepted", m)
		}
	}
	for op := Op(0); op < 255; op++ {
		if New(op) != nil && !seen[op] {
			t.Errorf("op %d has no sample", op)
		}
	}
}

func TestFrameErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"magic", []byte("GET / HTTP/1.1\r\n\r\n"), ErrBadMagic},
		{"version", []byte{'C', 'R', 9, 1, 0, 0, 0, 0, 0, 0, 0, 0}, ErrVersion},
		{"too big", []byte{'C', 'R', Version, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, ErrTooBig},
	}
	for _, c := range cases {
		_, _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(c.in)))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
	// truncated payload
	_, _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader([]byte{'C', 'R', Version, 1, 0, 0, 0, 0, 10, 0, 0, 0, 1})))
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("truncated: %v", err)
	}
}

func TestErrors(t *testing.T) {
	e := ErrorReply(Errorf(syscall.ENOTEMPTY, "rmdir /a: directory not empty")).Err()
	if !errors.Is(e, syscall.ENOTEMPTY) || e.Error() != "rmdir /a: directory not empty" {
		t.Errorf("got %v", e)
	}
	if e := ErrorReply(fs.ErrNotExist).Err(); !errors.Is(e, fs.ErrNotExist) {
		t.Errorf("ENOENT lost: %v", e)
	}
	if e := ErrorReply(errors.New("boom")).Err(); !errors.Is(e, syscall.EIO) {
		t.Errorf("default errno: %v", e)
	}
}

type echo struct{}

func (echo) Handle(ctx context.Context, req Msg) (Msg, error) {
	switch r := req.(type) {
	case *Read:
		if r.Len == 0 {
			<-ctx.Done() // never answers: for the timeout test
			return nil, ctx.Err()
		}
		return &DataReply{Data: bytes.Repeat([]byte{byte(r.Off)}, int(r.Len))}, nil
	case *Unlink:
		return nil, Errorf(syscall.ENOENT, r.Name+": no such file or directory")
	}
	return nil, nil
}

func startServer(t *testing.T) (string, *lockedWriter) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedWriter{w: &bytes.Buffer{}}
	s := &Server{Handler: echo{}, Log: slog.New(slog.NewTextHandler(logs, nil)), Security: testSec}
	go s.Serve(l)
	t.Cleanup(s.Close)
	return l.Addr().String(), logs
}

func TestServerCalls(t *testing.T) {
	addr, _ := startServer(t)
	p := Pool{Security: testSec}
	defer p.Close()
	ctx := context.Background()
	// many concurrent pipelined calls on the pooled connections
	errs := make(chan error, 100)
	for i := range 100 {
		go func() {
			m, err := p.Call(ctx, addr, &Read{Handle: 1, Off: uint64(i), Len: 1000})
			if err == nil && !bytes.Equal(m.(*DataReply).Data, bytes.Repeat([]byte{byte(i)}, 1000)) {
				err = errors.New("wrong data")
			}
			errs <- err
		}()
	}
	for range 100 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.Call(ctx, addr, &Unlink{Parent: 1, Name: "x"})
	if !errors.Is(err, fs.ErrNotExist) || err.Error() != "x: no such file or directory" {
		t.Errorf("remote error: %v", err)
	}
}

func TestServerTimeoutNamesServer(t *testing.T) {
	addr, _ := startServer(t)
	c, err := Dial(context.Background(), addr, testSec)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Call(ctx, &Read{Handle: 1, Len: 0})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("timeout error should name %s: %v", addr, err)
	}
}

func TestDialFailureNamesServer(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	p := Pool{Security: testSec}
	_, err := p.Call(context.Background(), addr, &Statfs{})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("got %v", err)
	}
}

// TestServerGarbage: garbage closes that connection with a logged reason and
// the server goes on serving others, both before the handshake and after it.
func TestServerGarbage(t *testing.T) {
	addr, logs := startServer(t)
	type input struct {
		authed bool
		in     []byte
		want   string // in the server's log
	}
	inputs := map[string]input{
		"bad magic":        {false, []byte("GET / HTTP/1.0\r\n\r\n"), "bad magic"},
		"version 1":        {false, []byte{'C', 'R', 1, 20, 0, 0, 0, 0, 0, 0, 0, 0}, "unsupported protocol version 1"},
		"big handshake":    {false, []byte{'C', 'R', Version, byte(OpHello), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}, "handshake frame of"},
		"no hello":         {false, []byte{'C', 'R', Version, byte(OpLookup), 1, 0, 0, 0, 0, 0, 0, 0}, "expected a handshake hello"},
		"version":          {true, []byte{'C', 'R', 7, 20, 0, 0, 0, 0, 0, 0, 0, 0}, "unsupported protocol version 7"},
		"too large":        {true, []byte{'C', 'R', Version, 20, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}, "frame too large"},
		"unknown op":       {true, []byte{'C', 'R', Version, 200, 1, 0, 0, 0, 0, 0, 0, 0}, "unknown op"},
		"reply as req":     {true, []byte{'C', 'R', Version, byte(OpOK), 1, 0, 0, 0, 0, 0, 0, 0}, "reply op"},
		"short body":       {true, []byte{'C', 'R', Version, byte(OpLookup), 1, 0, 0, 0, 2, 0, 0, 0, 1, 2}, "truncated"},
		"hello after auth": {true, []byte{'C', 'R', Version, byte(OpHello), 0, 0, 0, 0, 0, 0, 0, 0}, "unknown op 10"},
	}
	for name, c := range inputs {
		var nc net.Conn
		if c.authed {
			nc = authedConn(t, addr, testSec.Cred)
		} else {
			nc, _ = tlsConn(t, addr)
		}
		nc.Write(c.in)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if !closedWithoutReply(nc) {
			t.Errorf("%s: connection not closed", name)
		}
		nc.Close()
		waitLog(t, logs, c.want)
	}
	p := Pool{Security: testSec}
	defer p.Close()
	if _, err := p.Call(context.Background(), addr, &Read{Handle: 1, Off: 1, Len: 1}); err != nil {
		t.Fatalf("server stopped serving after garbage: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range append(append(append(samples(), posixSamples()...), idemSamples()...), redundancySamples()...) {
		var buf bytes.Buffer
		WriteFrame(&buf, 1, m)
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		op, id, payload, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		m, err := Decode(op, payload)
		if err != nil {
			return
		}
		// what decodes must re-encode to the same bytes
		var buf bytes.Buffer
		WriteFrame(&buf, id, m)
		if !bytes.Equal(buf.Bytes(), b[:HeaderLen+len(payload)]) {
			t.Fatalf("re-encoding differs for %T", m)
		}
	})
}

// An optional trailing field is written only when not zero, so an explicit
// zero is a second encoding of the same message: the decoder refuses it
// (the fuzzer found Read and Heal re-encoding shorter than they decoded).
func TestOptionalFieldExplicitZeroRefused(t *testing.T) {
	for _, m := range []Msg{&Read{Handle: 1, Off: 2, Len: 3}, &Heal{Handle: 1, Index: 2}, &Create{Parent: 1, Name: "f"}, &Create{Parent: 1, Name: "f", Reserved: 3}} {
		var e Enc
		m.Encode(&e)
		b := append(append([]byte(nil), e.B...), make([]byte, 8)...)
		if _, err := Decode(m.Op(), b); err == nil {
			t.Errorf("%T with an explicit zero Held decoded", m)
		}
		if _, err := Decode(m.Op(), e.B); err != nil {
			t.Errorf("%T without Held (the older form): %v", m, err)
		}
	}
	var e Enc
	(&ReplWrite{Handle: 1, Data: []byte("x")}).Encode(&e)
	for _, flag := range []byte{0, 2} {
		if _, err := Decode(OpReplWrite, append(append([]byte(nil), e.B...), flag)); err == nil {
			t.Errorf("ReplWrite with sync flag %d decoded", flag)
		}
	}
}
