package layout

import (
	"math"
	"math/rand"
	"testing"
)

func lay(stripe uint32, n int) Layout {
	l := Layout{StripeSize: stripe}
	for i := range n {
		l.Servers = append(l.Servers, uint32(10+i))
	}
	return l
}

func TestLocate(t *testing.T) {
	cases := []struct {
		stripe uint32
		n      int
		off    int64
		server int
		objOff int64
	}{
		{4096, 1, 0, 0, 0},
		{4096, 1, 12345, 0, 12345},
		{4096, 3, 0, 0, 0},
		{4096, 3, 4095, 0, 4095},
		{4096, 3, 4096, 1, 0},
		{4096, 3, 8192 + 7, 2, 7},
		{4096, 3, 12288, 0, 4096},
		{4096, 3, 3*4096*5 + 4096 + 1, 1, 5*4096 + 1},
		{65536, 4, 1 << 30, 0, 1 << 28},
	}
	for _, c := range cases {
		l := lay(c.stripe, c.n)
		k, o := l.Locate(c.off)
		if k != c.server || o != c.objOff {
			t.Errorf("stripe %d n %d off %d: got (%d,%d) want (%d,%d)", c.stripe, c.n, c.off, k, o, c.server, c.objOff)
		}
	}
}

// TestLocateBruteForce compares Locate with a byte-by-byte model of
// round-robin striping.
func TestLocateBruteForce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		l := lay(4096, n)
		objPos := make([]int64, n)
		for off := int64(0); off < 4096*int64(n)*4+100; off++ {
			want := int((off / 4096) % int64(n))
			k, o := l.Locate(off)
			if k != want || o != objPos[want] {
				t.Fatalf("n=%d off=%d: got (%d,%d) want (%d,%d)", n, off, k, o, want, objPos[want])
			}
			objPos[want]++
		}
	}
}

func TestObjectSize(t *testing.T) {
	cases := []struct {
		stripe uint32
		n      int
		size   int64
		want   []int64
	}{
		{4096, 3, 0, []int64{0, 0, 0}},
		{4096, 3, 1, []int64{1, 0, 0}},
		{4096, 3, 4096, []int64{4096, 0, 0}},
		{4096, 3, 4097, []int64{4096, 1, 0}},
		{4096, 3, 3 * 4096, []int64{4096, 4096, 4096}},
		{4096, 3, 3*4096 + 10, []int64{4106, 4096, 4096}},
		{4096, 3, 5*4096 + 300, []int64{8192, 8192, 4096 + 300}},
		// stripe size not dividing the file size, one server
		{4096, 1, 10000, []int64{10000}},
		{65536, 4, 1<<20 + 1, []int64{262145, 262144, 262144, 262144}},
	}
	for _, c := range cases {
		l := lay(c.stripe, c.n)
		var sum int64
		for k := range c.n {
			got := l.ObjectSize(k, c.size)
			sum += got
			if got != c.want[k] {
				t.Errorf("stripe %d n %d size %d server %d: got %d want %d", c.stripe, c.n, c.size, k, got, c.want[k])
			}
		}
		if sum != c.size {
			t.Errorf("stripe %d n %d size %d: objects sum to %d", c.stripe, c.n, c.size, sum)
		}
	}
}

// TestObjectSizeMatchesLocate: the object size for a file of size S is one
// past the highest object offset any byte below S maps to (truncation relies
// on this).
func TestObjectSizeMatchesLocate(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for range 2000 {
		l := lay(uint32(4096*(1+r.Intn(4))), 1+r.Intn(6))
		size := r.Int63n(int64(l.StripeSize) * int64(len(l.Servers)) * 5)
		want := make([]int64, len(l.Servers))
		if size > 0 {
			// every unit below size contributes; check the last byte of each unit
			for off := int64(0); off < size; off += int64(l.StripeSize) {
				last := min(off+int64(l.StripeSize), size) - 1
				k, o := l.Locate(last)
				want[k] = o + 1
			}
		}
		for k := range l.Servers {
			if got := l.ObjectSize(k, size); got != want[k] {
				t.Fatalf("%+v size %d server %d: got %d want %d", l, size, k, got, want[k])
			}
		}
	}
}

func TestChunks(t *testing.T) {
	l := lay(4096, 3)
	got := l.Chunks(4000, 9000)
	want := []Chunk{
		{0, 4000, 4000, 96},
		{1, 0, 4096, 4096},
		{2, 0, 8192, 4096},
		{0, 4096, 12288, 712},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("chunk %d: got %+v want %+v", i, got[i], want[i])
		}
	}
	if l.Chunks(5, 0) != nil {
		t.Error("empty range gave chunks")
	}
	// sparse: a range far past any written data still maps exactly
	var total int64
	for _, c := range l.Chunks(1<<40+3, 3*4096) {
		total += c.Len
		if c.Len > 4096 || c.Len <= 0 {
			t.Errorf("bad chunk %+v", c)
		}
	}
	if total != 3*4096 {
		t.Errorf("chunks cover %d bytes", total)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		l  Layout
		ok bool
	}{
		{lay(65536, 3), true},
		{lay(1000, 3), false},
		{lay(4096+100, 3), false},
		{lay(128<<20, 3), false},
		{Layout{StripeSize: 65536}, false},
		{Layout{StripeSize: 65536, Servers: []uint32{1, 1}}, false},
	}
	for _, c := range cases {
		if err := c.l.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: err=%v", c.l, err)
		}
	}
}

// MaxFileSize is exactly the size at which column 0's object reaches
// MaxObjectSize: one byte more would need a larger object.
func TestMaxFileSize(t *testing.T) {
	for _, tc := range []struct {
		stripe uint32
		n      int
		want   int64
	}{
		{64 << 10, 1, MaxObjectSize},
		{1536, 1, MaxObjectSize},
		{64 << 10, 2, math.MaxInt64}, // 2^63 does not fit an int64
		{64 << 10, 0, MaxObjectSize},
	} {
		l := lay(tc.stripe, tc.n)
		if got := l.MaxFileSize(); got != tc.want {
			t.Errorf("stripe %d, %d servers: %d, want %d", tc.stripe, tc.n, got, tc.want)
		}
	}
	// With a stripe that does not divide the object limit: the limit is
	// reached exactly, one byte more passes it.
	l := lay(1536, 1)
	m := l.MaxFileSize()
	if l.ObjectSize(0, m) != MaxObjectSize || l.ObjectSize(0, m+1) <= MaxObjectSize {
		t.Fatalf("objects at the max file size %d: %d, one more: %d", m, l.ObjectSize(0, m), l.ObjectSize(0, m+1))
	}
}
