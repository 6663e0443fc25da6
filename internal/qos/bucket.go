package qos

import "time"

// Bucket is a token bucket: Rate tokens a second, at most Burst saved.
// Not safe for concurrent use (Admission holds its lock around it).
type Bucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// NewBucket is a full bucket at now.
func NewBucket(rate float64, burst int, now time.Time) *Bucket {
	b := float64(burst)
	if b <= 0 {
		b = max(1, rate)
	}
	return &Bucket{rate: rate, burst: b, tokens: b, last: now}
}

func (b *Bucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// Take takes a token if there is one.
func (b *Bucket) Take(now time.Time) bool {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// Reserve takes a token now or promises the next one free within
// maxWait: it returns how long the caller must wait before using it, and
// false (taking nothing) if that is longer than maxWait.
func (b *Bucket) Reserve(now time.Time, maxWait time.Duration) (time.Duration, bool) {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	secs := (1 - b.tokens) / b.rate // in float: a tiny rate must not overflow a Duration
	if secs > maxWait.Seconds() {
		return 0, false
	}
	wait := time.Duration(secs * float64(time.Second))
	b.tokens-- // below zero: the waiters ahead are paid for first
	return wait, true
}
