package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// A director's agent long-polls the station's feedback publications
// (api.RouteFeedback) and hands each to Options.Feedback: weights change
// every poll, so they travel apart from the versioned configuration.

// maxFeedback bounds one publication (10,000 servers with every term is
// about 8 MB).
const maxFeedback = 32 << 20

// feedbackLoop runs until ctx ends. A station that is away, or one that
// has no monitor, is asked again after a pause; the director meanwhile
// keeps (then decays) the last weights by itself.
func (a *Agent) feedbackLoop(ctx context.Context) {
	var seq uint64
	var lastErr string // logged once until it changes: publications come every interval
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		b, err := a.pollFeedback(ctx, seq, pollWait)
		if ctx.Err() != nil {
			return
		}
		if err == nil && len(b) > 0 {
			var head struct {
				Seq uint64 `json:"seq"`
			}
			if err = json.Unmarshal(b, &head); err == nil {
				seq = head.Seq
				if err = a.opt.Feedback(b); err != nil && err.Error() != lastErr {
					a.log.Warn("station feedback not applied", "seq", head.Seq, "err", err)
				}
				lastErr = ""
				if err != nil {
					lastErr = err.Error()
				}
				backoff = 100 * time.Millisecond
				continue
			}
		}
		if err == nil {
			continue // 204: nothing newer within the wait
		}
		// 404 (no monitor at the station) or the station away: ask
		// again after a pause rather than in a tight loop.
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// pollFeedback is one long-poll; empty without error: nothing newer.
func (a *Agent) pollFeedback(ctx context.Context, after uint64, wait time.Duration) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, wait+callTimeout)
	defer cancel()
	buf := &limitBuffer{max: maxFeedback}
	q := "?after=" + strconv.FormatUint(after, 10) + "&wait=" + wait.String()
	if err := a.cl.Do(cctx, http.MethodGet, api.RouteFeedback+q, nil, buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
