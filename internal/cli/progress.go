package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressQuiet turns progress bars off (fs --quiet).
var progressQuiet bool

// progressEvery is the least time between two redraws: at most 10 a second.
const progressEvery = 100 * time.Millisecond

// progress draws a one-line bar on standard error while a transfer runs:
// bytes so far, rate and time left. A nil *progress draws nothing.
type progress struct {
	w          io.Writer
	label      string
	total, cur int64 // total < 0: unknown (standard input)
	start      time.Time
	last       time.Time
	now        func() time.Time // clock seam for tests
}

// newProgress returns a bar for a transfer of total bytes (< 0: unknown),
// or nil when standard error is not a terminal, with --quiet, or for a
// transfer too small to watch.
func newProgress(label string, total int64) *progress {
	return newProgressTo(os.Stderr, isTTYFile(os.Stderr), label, total, time.Now)
}

func newProgressTo(w io.Writer, tty bool, label string, total int64, now func() time.Time) *progress {
	if !tty || progressQuiet || total >= 0 && total < 8<<20 {
		return nil
	}
	return &progress{w: w, label: label, total: total, start: now(), now: now}
}

func isTTYFile(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// set records n bytes done and redraws if the last draw is old enough.
func (p *progress) set(n int64) {
	if p == nil {
		return
	}
	p.cur = n
	t := p.now()
	if !p.last.IsZero() && t.Sub(p.last) < progressEvery {
		return
	}
	p.last = t
	fmt.Fprintf(p.w, "\r%s ", progressLine(p.label, n, p.total, t.Sub(p.start)))
}

// done draws the final state and ends the line.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.last = time.Time{}
	if p.total >= 0 {
		p.cur = p.total
	}
	p.set(p.cur)
	fmt.Fprintln(p.w)
}

// progressLine renders one state of a transfer: label, bar and percentage
// when the total is known, bytes, rate, and the time left at that rate.
func progressLine(label string, n, total int64, elapsed time.Duration) string {
	rate := float64(n) / max(elapsed.Seconds(), 1e-3)
	if total < 0 {
		return fmt.Sprintf("%s %s %s/s", label, human(n), human(int64(rate)))
	}
	frac := min(float64(n)/float64(max(total, 1)), 1)
	const w = 30
	fill := int(frac * w)
	eta := "--:--"
	if n >= total {
		eta = clockText(elapsed) // done: how long it took
	} else if rate >= 1 {
		eta = "ETA " + clockText(time.Duration(float64(total-n)/rate*float64(time.Second)))
	}
	return fmt.Sprintf("%s [%s%s] %3.0f%% %s/%s %s/s %s", label, strings.Repeat("=", fill), strings.Repeat(" ", w-fill),
		frac*100, human(n), human(total), human(int64(rate)), eta)
}

// clockText renders a duration as m:ss, or h:mm:ss from an hour on.
func clockText(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
