package iod

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/corral-cluster/corral/internal/obs"
)

// Healthy tells the truth: not before meta accepted the server, and not
// when its data directory cannot take a file.
func TestHealthyNeedsRegistrationAndAWritableDir(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	ctx := context.Background()
	if err := st.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("unregistered: %v", err)
	}
	st.registered.Store(true)
	if err := st.Healthy(ctx); err != nil {
		t.Fatalf("registered: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "objects", ".healthz-*")); len(left) != 0 {
		t.Fatalf("the check left %v", left)
	}
	// The disk is gone (root ignores permissions, so remove the directory).
	if err := os.RemoveAll(filepath.Join(dir, "objects")); err != nil {
		t.Fatal(err)
	}
	if err := st.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("objects directory removed: %v", err)
	}
}

// /healthz is served to anyone who reaches the port: a thousand probes
// run the check (which creates a file) only a few times, and a failing
// answer names no directory or address.
func TestHealthzCachedAndTerse(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	st.registered.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := obs.ListenHTTP(ctx, "127.0.0.1:0", obs.Mux(obs.NewRegistry(), st.healthz(quiet)), nil)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + "/healthz"
	get := func() (int, string) {
		t.Helper()
		r, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}

	// Count the files the checks create, as the kernel reports them.
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.InotifyAddWatch(fd, filepath.Join(dir, "objects"), syscall.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 1000 {
		if code, body := get(); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("probe %d: %d %q", i, code, body)
		}
	}
	took := time.Since(start)
	created := 0
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(fd, buf)
		if n <= 0 || err != nil {
			break
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+int(ev.Len)], "\x00"))
			if strings.HasPrefix(name, ".healthz-") {
				created++
			}
			off += syscall.SizeofInotifyEvent + int(ev.Len)
		}
	}
	if limit := int(took/healthEvery) + 2; created > limit || created == 0 {
		t.Fatalf("1000 probes in %v created %d files, want 1 to %d", took, created, limit)
	}

	// Failing: the answer is short and names nothing internal.
	if err := os.RemoveAll(filepath.Join(dir, "objects")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(healthEvery + 50*time.Millisecond) // the cached answer ages out
	code, body := get()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not writable") {
		t.Fatalf("objects removed: %d %q", code, body)
	}
	if strings.Contains(body, dir) || strings.Contains(body, "/") || strings.Contains(body, "127.0.0.1") || len(body) > 80 {
		t.Fatalf("health answer names internals: %q", body)
	}
}
