package extent

import (
	"slices"
	"testing"
)

func TestOffLen(t *testing.T) {
	for _, c := range []struct {
		off, n uint64
		want   Range
	}{
		{10, 5, Range{10, 15}},
		{10, 0, Range{10, End}},
		{End - 1, 5, Range{End - 1, End}}, // would overflow: to the end
	} {
		got := FromOffLen(c.off, c.n)
		if got != c.want {
			t.Errorf("FromOffLen(%d, %d) = %v, want %v", c.off, c.n, got, c.want)
		}
		if off, n := got.OffLen(); got.Hi != End && (off != c.off || n != c.n) || got.Hi == End && n != 0 {
			t.Errorf("%v.OffLen() = %d, %d", got, off, n)
		}
	}
}

func TestRangePredicates(t *testing.T) {
	a, b, c := Range{0, 10}, Range{10, 20}, Range{5, End}
	if a.Overlaps(b) || !a.Touches(b) {
		t.Errorf("adjacent %v %v: overlaps %v touches %v", a, b, a.Overlaps(b), a.Touches(b))
	}
	if !a.Overlaps(c) || !c.Overlaps(b) {
		t.Errorf("%v should overlap %v and %v", c, a, b)
	}
	if (Range{3, 3}).Overlaps(a) {
		t.Error("an empty range overlaps nothing")
	}
	if got := (Range{}).Hull(b); got != b {
		t.Errorf("empty hull %v = %v, want %v", b, got, b)
	}
	if got := a.Hull(Range{30, 40}); got != (Range{0, 40}) {
		t.Errorf("hull = %v, want [0, 40)", got)
	}
	if s := c.String(); s != "[5, end)" {
		t.Errorf("String = %q", s)
	}
}

func TestUnionIntersect(t *testing.T) {
	u := Union([]Range{{20, 30}, {0, 5}, {7, 7}}, []Range{{5, 8}, {25, 40}})
	if want := []Range{{0, 8}, {20, 40}}; !slices.Equal(u, want) {
		t.Fatalf("Union = %v, want %v", u, want)
	}
	in := Intersect(u, []Range{{4, 22}, {35, End}})
	if want := []Range{{4, 8}, {20, 22}, {35, 40}}; !slices.Equal(in, want) {
		t.Fatalf("Intersect = %v, want %v", in, want)
	}
	if got := Intersect(u, nil); got != nil {
		t.Fatalf("Intersect with nothing = %v", got)
	}
}
