package director

import (
	"context"
	"sync"
	"time"
)

// RateInterval is how often the director samples its counters for the
// rates in the admin API, as the LVS estimator does (2 s).
const RateInterval = 2 * time.Second

// Rate is a counter's speed over the last sampling interval, like the
// columns of `ipvsadm -Ln --rate`: connections (l7: responses) per second,
// bytes per second in (client to server) and out, and for dataplane xdp
// packets per second in (the proxies count no packets).
type Rate struct {
	CPS    float64 `json:"conns_per_sec"`
	InBPS  float64 `json:"bytes_in_per_sec"`
	OutBPS float64 `json:"bytes_out_per_sec"`
	InPPS  float64 `json:"packets_in_per_sec,omitempty"`
}

type rateCounters struct{ conns, in, out, pkts int64 }

type rateKey struct{ service, server string } // server "": the whole service

// rates keeps the last sample of every counter and the rates between the
// last two samples. Rates over the last interval (not smoothed): a number
// an operator can check against two readings of the totals.
type rates struct {
	mu   sync.Mutex
	at   time.Time
	last map[rateKey]rateCounters
	rate map[rateKey]Rate
}

// sample reads every counter at now and computes the rates since the
// previous sample. The clock is the caller's, so tests need no sleeping.
func (rt *rates) sample(d *Director, now time.Time) {
	cur := map[rateKey]rateCounters{}
	for name, s := range *d.services.Load() {
		tot := rateCounters{conns: s.newConns.Load()}
		s.mu.Lock()
		for _, r := range s.reals {
			c := rateCounters{conns: r.conns.Load(), in: r.bytesIn.Load(), out: r.bytesOut.Load(), pkts: r.packets.Load()}
			cur[rateKey{name, r.addr}] = c
			tot.in += c.in
			tot.out += c.out
			tot.pkts += c.pkts
		}
		s.mu.Unlock()
		cur[rateKey{name, ""}] = tot
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	next := map[rateKey]Rate{}
	if dt := now.Sub(rt.at).Seconds(); !rt.at.IsZero() && dt > 0 {
		for k, c := range cur {
			p, ok := rt.last[k]
			if !ok {
				continue // new since the last sample: no rate yet
			}
			// A counter that went down (a server removed from the
			// service total) reads as 0, never negative.
			per := func(a, b int64) float64 { return max(0, float64(a-b)/dt) }
			next[k] = Rate{CPS: per(c.conns, p.conns), InBPS: per(c.in, p.in), OutBPS: per(c.out, p.out), InPPS: per(c.pkts, p.pkts)}
		}
	}
	rt.at, rt.last, rt.rate = now, cur, next
}

// get returns the rate of a service (server "") or of one of its servers.
func (rt *rates) get(service, server string) Rate {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.rate[rateKey{service, server}]
}

// sampleRates samples every RateInterval until ctx ends.
func (d *Director) sampleRates(ctx context.Context) {
	t := time.NewTicker(RateInterval)
	defer t.Stop()
	d.rates.sample(d, time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.rates.sample(d, now)
		}
	}
}
