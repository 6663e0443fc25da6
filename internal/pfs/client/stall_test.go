package client_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
)

// TestSyncStoppedCopyBounded: fsync gives a copy that does not answer
// client.Patience once another copy of its column answered, then marks it
// stale; it does not wait 2 s plus the dirty span at 8 MiB/s (48 MiB apart:
// 8 s; 1 GiB: 130 s).
func TestSyncStoppedCopyBounded(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	f := e.open(t)
	defer f.Close()
	mustWrite(t, f, []byte("a"), 0)
	mustWrite(t, f, []byte("b"), 48<<20)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	// Under load a write may have failed over (a head slower than
	// client.Patience): wait until the client's probe finds both servers
	// answering again, so the fsync below starts with both copies live.
	for deadline := time.Now().Add(10 * time.Second); e.cl.Down(1) || e.cl.Down(2); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("servers still down 10 s after the writes")
		}
	}
	before := len(e.meta.Marks())
	e.iod(2).mode.Store(modeHang) // stopped after the writes landed
	start := time.Now()
	if err := f.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("fsync took %v with one copy stopped (want about client.Patience = %v, at most 5 s)", d.Round(time.Millisecond), client.Patience)
	}
	t.Logf("fsync took %v", time.Since(start).Round(time.Millisecond))
	marks := e.meta.Marks()[before:]
	if len(marks) == 0 {
		t.Fatal("the fsync marked no copy stale")
	}
	for _, m := range marks {
		if len(m.Servers) != 1 || m.Servers[0] != 2 {
			t.Fatalf("stale marks of the fsync %+v, want only server 2", marks)
		}
	}
}

// TestWriteNoCurrentCopyRetriesFirstCopy: when meta refuses a write's
// stale mark because no copy would be current (EIO), the write is sent once
// more through the column's first copy, forwarding to the others, before
// it fails.
func TestWriteNoCurrentCopyRetriesFirstCopy(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	f := e.open(t)
	defer f.Close()
	e.cl.MarkDown(1) // this client writes through server 2 and leaves 1 out
	e.meta.mu.Lock()
	e.meta.eio = 1
	e.meta.mu.Unlock()
	data := bytes.Repeat([]byte("z"), 4096)
	mustWrite(t, f, data, 0)
	if err := f.Flush(); err != nil { // not Sync: it would mark down server 1 stale
		t.Fatalf("write failed: %v", err)
	}
	for id := uint32(1); id <= 2; id++ {
		if got := e.iod(id).Data(7, 0); !bytes.Equal(got, data) {
			t.Fatalf("server %d holds %q..., want the write", id, got[:min(4, len(got))])
		}
	}
	if n := e.iod(1).repl.Load(); n != 1 {
		t.Fatalf("server 1 headed %d writes, want the retry", n)
	}
	if m := e.meta.Marks(); len(m) != 0 {
		t.Fatalf("stale marks %+v after the retry reached every copy, want none", m)
	}
}

// TestWriteDoubleFaultNamesBoth: a write that fails because one copy missed
// it and meta refuses to mark that copy stale (no copy would be current)
// says what happened to the copy that missed it, not only that meta
// refused.
func TestWriteDoubleFaultNamesBoth(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	f := e.open(t)
	defer f.Close()
	e.iod(2).mode.Store(modeFail) // takes no write, its forwards included
	e.meta.mu.Lock()
	e.meta.eio = 10
	e.meta.mu.Unlock()
	mustWrite(t, f, bytes.Repeat([]byte("z"), 4096), 0)
	err := f.Flush()
	if err == nil {
		t.Fatal("write succeeded with its only other copy failing and meta refusing the mark")
	}
	for _, want := range []string{"server 2 missed the write forwarded by head 1", "injected failure", "stale"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("write error %q does not say %q", err, want)
		}
	}
}
