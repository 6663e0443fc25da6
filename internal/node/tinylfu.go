package node

import "math/bits"

// tinyLFU estimates how often each key was asked for recently (TinyLFU:
// Einziger, Friedman, Manes, "TinyLFU: A Highly Efficient Cache Admission
// Policy", 2017). A key's first sighting only sets its bit in the
// doorkeeper, a small Bloom filter, so the many keys seen once (a crawler's
// scan) never reach the count-min sketch; later sightings count there.
// Every sampleSize touches all counters halve and the doorkeeper empties,
// so the estimates follow a popularity that shifts (aging).
//
// Not safe for concurrent use: the data cache calls it under its lock.
type tinyLFU struct {
	sketch     countMin
	door       doorkeeper
	additions  int
	sampleSize int
}

// newTinyLFU sizes the sketch for about n distinct hot keys.
func newTinyLFU(n int) *tinyLFU {
	w := 64
	for w < n && w < 1<<22 {
		w <<= 1
	}
	t := &tinyLFU{sampleSize: 10 * w}
	t.sketch.init(w)
	t.door.init(128 * w) // ~13 bits per key of a sample: few false positives
	return t
}

// touch records one request for key.
func (t *tinyLFU) touch(key uint64) {
	h := mix(key)
	if t.door.testAndSet(h) {
		t.sketch.incr(h)
	}
	if t.additions++; t.additions >= t.sampleSize {
		t.reset()
	}
}

// estimate is key's recent request count (saturating at countMax+1).
func (t *tinyLFU) estimate(key uint64) int {
	h := mix(key)
	n := t.sketch.min(h)
	if t.door.has(h) {
		n++
	}
	return n
}

// reset halves every counter and empties the doorkeeper: a key's old
// popularity weighs half as much as its new. The next aging is a whole
// sample later (halving additions, as the paper does, makes every aging
// after the first come twice as often).
func (t *tinyLFU) reset() {
	t.sketch.halve()
	t.door.clear()
	t.additions = 0
}

// countMax is the largest count a sketch counter holds (4 bits' worth,
// as in the paper: an admission decision needs no more).
const countMax = 15

// countMin is a count-min sketch of depth 4: a key's count is the least of
// its four counters, each in its own row, so collisions only ever raise an
// estimate, and rarely all four at once.
type countMin struct {
	rows [4][]uint8
	mask uint64
}

func (c *countMin) init(width int) {
	for i := range c.rows {
		c.rows[i] = make([]uint8, width)
	}
	c.mask = uint64(width - 1)
}

// index is the counter of hash h in row i: h mixed again with the row's
// seed, so two keys that collide in one row rarely collide in another.
func (c *countMin) index(h uint64, i int) uint64 {
	return mix(h+seeds[i]) & c.mask
}

func (c *countMin) incr(h uint64) {
	for i := range c.rows {
		if p := &c.rows[i][c.index(h, i)]; *p < countMax {
			*p++
		}
	}
}

func (c *countMin) min(h uint64) int {
	m := countMax
	for i := range c.rows {
		m = min(m, int(c.rows[i][c.index(h, i)]))
	}
	return m
}

func (c *countMin) halve() {
	for i := range c.rows {
		for j := range c.rows[i] {
			c.rows[i][j] >>= 1
		}
	}
}

// doorkeeper is a Bloom filter with two probes per key.
type doorkeeper struct {
	bits []uint64
	mask uint64
}

func (d *doorkeeper) init(nbits int) {
	d.bits = make([]uint64, nbits/64)
	d.mask = uint64(nbits - 1)
}

func (d *doorkeeper) probes(h uint64) (uint64, uint64) {
	return h & d.mask, bits.RotateLeft64(h, 32) & d.mask
}

func (d *doorkeeper) has(h uint64) bool {
	a, b := d.probes(h)
	return d.bits[a/64]&(1<<(a%64)) != 0 && d.bits[b/64]&(1<<(b%64)) != 0
}

// testAndSet reports whether h was in the filter, and puts it there.
func (d *doorkeeper) testAndSet(h uint64) bool {
	if d.has(h) {
		return true
	}
	a, b := d.probes(h)
	d.bits[a/64] |= 1 << (a % 64)
	d.bits[b/64] |= 1 << (b % 64)
	return false
}

func (d *doorkeeper) clear() { clear(d.bits) }

// seeds make the sketch's rows independent hash functions.
var seeds = [4]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0xd6e8feb86659fd93}

// mix is SplitMix64's finalizer: inode numbers are small and dense, their
// bits must spread over the whole word before they pick counters.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
