package director

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"
)

// A director joined to a management station whose configuration says
// `weights: feedback` runs no monitor of its own: the station polls the
// servers (once for all directors) and publishes every decision; the
// director's agent fetches each publication and hands it to
// ApplyStationFeedback, which sets the same fb atomics the director's own
// monitor would (then pokeXDP), so every dataplane follows and `corral
// ctl feedback` shows the station's terms with source "station".
//
// If the station goes silent the director keeps the last weights for
// StationGrace intervals (a late poll or a station restart is not worth a
// change; timeouts instead when the station's timeout is the longer: a
// round with a silent server lasts that long), then decays them towards
// the floor, half the distance per two intervals, exactly as the
// controller decays a server that does not answer. The floor, not the
// configured weights: without measurements the director cannot tell
// which servers are loaded, and the floor is what
// the controller itself gives a server it knows nothing of; it also keeps
// every server in rotation, with equal shares once decayed, where a jump
// back to configured weights could pile load on a server the station had
// just relieved. A new publication ends the decay at once.

// StationGrace is how many intervals a silent station's weights are kept
// as they are before they decay.
const StationGrace = 3

// Bounds of a publication (the agent reads at most maxStationFeedback bytes).
const (
	maxStationServices = 10000
	maxStationServers  = 100000
)

type stationFeedback struct {
	mu       sync.Mutex
	st       *FeedbackStatus // the latest publication; nil: not fed
	got      time.Time       // when it arrived (our clock)
	interval time.Duration
	keep     float64       // share of the distance to the floor applied (1: as published)
	stop     chan struct{} // ends the watchdog; nil: none runs
	done     chan struct{}
}

// DecodeStationFeedback reads a station's publication (GET /v1/feedback)
// and checks what the director relies on: an interval it can time, a
// floor and weights that are weights, bounded sizes.
func DecodeStationFeedback(b []byte) (FeedbackStatus, error) {
	var st FeedbackStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("station feedback: %w", err)
	}
	iv, err := time.ParseDuration(st.Interval)
	if err != nil || iv < 100*time.Millisecond || iv > time.Minute {
		return st, fmt.Errorf("station feedback: interval %q: want 100ms..1m", st.Interval)
	}
	if to, err := time.ParseDuration(st.Timeout); st.Timeout != "" && (err != nil || to < 0 || to > time.Minute) {
		return st, fmt.Errorf("station feedback: timeout %q: want up to 1m", st.Timeout)
	}
	if st.Floor < 0 || st.Floor > 65535 {
		return st, fmt.Errorf("station feedback: floor %d: want 0..65535", st.Floor)
	}
	if len(st.Services) > maxStationServices {
		return st, fmt.Errorf("station feedback: %d services: at most %d", len(st.Services), maxStationServices)
	}
	n := 0
	for _, s := range st.Services {
		n += len(s.Nodes)
		if n > maxStationServers {
			return st, fmt.Errorf("station feedback: more than %d servers", maxStationServers)
		}
		for _, d := range s.Nodes {
			if d.Weight < 0 || d.Weight > 65535 {
				return st, fmt.Errorf("station feedback: service %.64q server %.64q: weight %d: want 0..65535", s.Name, d.Node, d.Weight)
			}
		}
	}
	return st, nil
}

// ApplyStationFeedback applies the station's publication st (decoded by
// DecodeStationFeedback): each listed server of each listed service gets
// its weight; services the station no longer lists go back to their
// configured weights. An older or repeated publication (Seq not above the
// last) is ignored, unless the station restarted (Seq went back with a
// newer Time).
func (d *Director) ApplyStationFeedback(st FeedbackStatus) error {
	if d.fb.Load() != nil {
		return fmt.Errorf("station feedback: this director runs its own feedback block")
	}
	iv, err := time.ParseDuration(st.Interval)
	if err != nil || iv <= 0 {
		return fmt.Errorf("station feedback: interval %q", st.Interval)
	}
	// A round lasts up to the request timeout when a server does not
	// answer: with a timeout above the interval, publications come that
	// far apart without the station being silent.
	if to, err := time.ParseDuration(st.Timeout); err == nil && to > iv {
		iv = to
	}
	f := &d.sfb
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st != nil && st.Seq <= f.st.Seq && !st.Time.After(f.st.Time) {
		return nil
	}
	old := f.st
	st.Poll = st.Source
	st.Source = "station"
	st.Stale = ""
	f.st, f.got, f.interval, f.keep = &st, time.Now(), iv, 1
	d.applyStationLocked(old, 1)
	if f.stop == nil {
		f.stop, f.done = make(chan struct{}), make(chan struct{})
		go d.stationWatchdog(f.stop, f.done)
	}
	return nil
}

// applyStationLocked sets every listed server's weight, scaled towards
// the floor by keep (1: as published), and clears the services old listed
// that the latest does not (sfb.mu held).
func (d *Director) applyStationLocked(old *FeedbackStatus, keep float64) {
	st := d.sfb.st
	live := *d.services.Load()
	listed := map[string]bool{}
	changed := false
	for _, ps := range st.Services {
		listed[ps.Name] = true
		s := live[ps.Name]
		if s == nil {
			continue // not (yet) in this director's version
		}
		w := map[string]int64{}
		for _, n := range ps.Nodes {
			w[n.Node] = decayed(n.Weight, st.Floor, keep)
		}
		s.mu.Lock()
		for _, r := range s.reals {
			// A server the station does not list (drained, weight 0, not
			// in its version yet) takes its configured weight.
			v, ok := w[r.addr]
			if !ok {
				v = -1
			}
			if r.fb.Swap(v) != v {
				changed = true
			}
		}
		s.mu.Unlock()
	}
	if old != nil {
		for _, ps := range old.Services {
			if s := live[ps.Name]; s != nil && !listed[ps.Name] {
				s.clearFeedback()
			}
		}
	}
	if changed {
		d.pokeXDP()
	}
}

// decayed is w moved towards floor: keep of the distance remains.
func decayed(w, floor int, keep float64) int64 {
	if keep >= 1 || w <= floor {
		return int64(w)
	}
	v := float64(floor) + float64(w-floor)*keep
	if v-float64(floor) < 0.5 {
		return int64(floor)
	}
	return int64(math.Round(v))
}

// stationKeep is the share of the distance to the floor a publication
// got at still keeps at now: 1 for StationGrace intervals, then halving
// every two intervals (the controller's DecayHalfLife default).
func stationKeep(got, now time.Time, interval time.Duration) float64 {
	silent := now.Sub(got) - StationGrace*interval
	if silent <= 0 {
		return 1
	}
	return math.Exp2(-float64(silent) / float64(2*interval))
}

// stationWatchdog decays the weights of a silent station, checking every
// interval until stop is closed.
func (d *Director) stationWatchdog(stop, done chan struct{}) {
	defer close(done)
	f := &d.sfb
	for {
		f.mu.Lock()
		iv := f.interval
		f.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(iv):
		}
		f.mu.Lock()
		if f.st != nil && len(f.st.Services) > 0 {
			now := time.Now()
			if k := stationKeep(f.got, now, f.interval); k < 1 {
				f.st.Stale = fmt.Sprintf("station silent for %v: weights decaying towards floor %d (kept %.0f%% of the distance)",
					now.Sub(f.got).Round(time.Millisecond), f.st.Floor, 100*k)
				f.keep = k
				d.applyStationLocked(nil, k)
			}
		}
		f.mu.Unlock()
	}
}

// reapplyStationFeedback sets the station's weights again after a new
// version was applied (its new servers had none); false when the station
// does not feed this director.
func (d *Director) reapplyStationFeedback() bool {
	f := &d.sfb
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st == nil {
		return false
	}
	d.applyStationLocked(nil, f.keep)
	return true
}

// StopStationFeedback ends the station's feed: the watchdog stops and the
// services go back to their configured weights.
func (d *Director) StopStationFeedback() {
	f := &d.sfb
	f.mu.Lock()
	stop, done, st := f.stop, f.done, f.st
	f.stop, f.done, f.st = nil, nil, nil
	f.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	if st != nil {
		live := *d.services.Load()
		for _, ps := range st.Services {
			if s := live[ps.Name]; s != nil {
				s.clearFeedback()
			}
		}
	}
}

// stationFeedbackStatus is the latest publication with the weights as
// applied (decayed while the station is silent: the watchdog's latest
// step, so ctl and metrics show what the pickers use).
func (d *Director) stationFeedbackStatus() (FeedbackStatus, bool) {
	f := &d.sfb
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st == nil || len(f.st.Services) == 0 {
		// Not fed, or the station's configuration has no feedback
		// section any more: as a director without a block.
		return FeedbackStatus{}, false
	}
	st := *f.st
	k := f.keep
	st.Services = make([]FeedbackService, len(f.st.Services))
	for i, ps := range f.st.Services {
		ps.Nodes = append([]FeedbackNode(nil), ps.Nodes...)
		for j := range ps.Nodes {
			ps.Nodes[j].Weight = int(decayed(ps.Nodes[j].Weight, st.Floor, k))
		}
		st.Services[i] = ps
	}
	return st, true
}
