package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDiedQuotesItsOwnLog: the supervisor's "died" line quotes the lines
// of the process that died that say why (an error, a panic), not its last
// line whatever it is, and never a line an earlier process of the role
// left in the same log.
func TestDiedQuotesItsOwnLog(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'corral x: listening on 127.0.0.1:1'\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	died := func(bin string) Event {
		t.Helper()
		log := filepath.Join(dir, "role.log")
		os.WriteFile(log, []byte("time=old level=ERROR msg=\"an earlier process's complaint\"\n"), 0o600)
		p, err := Start(context.Background(), "role", bin, log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		evs := make(chan Event, 4)
		s := slot{get: func() *Proc { return p }, set: func(*Proc) {},
			restart: func(context.Context, string) (*Proc, error) { return nil, errors.New("not in this test") }}
		go supervise(ctx, s, Backoff{Min: time.Hour, Max: time.Hour, Reset: time.Hour}, func(e Event) { evs <- e })
		select {
		case e := <-evs:
			return e
		case <-time.After(20 * time.Second):
			t.Fatal("no event within 20 s")
		}
		return Event{}
	}
	e := died(script("fails", "echo 'time=1 level=ERROR msg=\"open data: permission denied\"'\necho 'time=2 level=INFO msg=\"closing listeners\"'\nexit 1\n"))
	if !strings.Contains(e.String(), "permission denied") || strings.Contains(e.String(), "earlier process") {
		t.Errorf("died line %q, want the process's own error", e)
	}
	e = died(script("exits", "echo 'time=1 level=ERROR msg=\"a transient error\"'\necho 'corral role: listen 127.0.0.1:1: address already in use'\nexit 1\n"))
	if !strings.Contains(e.String(), "address already in use") {
		t.Errorf("died line %q, want the error the command exited with", e)
	}
	e = died(script("silent", "exit 3\n"))
	if strings.Contains(e.String(), "earlier process") || !strings.Contains(e.String(), "exit status 3") {
		t.Errorf("died line of a process that wrote nothing %q: an earlier process's line", e)
	}
}
