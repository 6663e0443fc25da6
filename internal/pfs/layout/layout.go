// Package layout is the striping arithmetic of the parallel file system: how a
// file's bytes map onto its I/O servers' objects (PVFS round-robin striping).
//
// A file with stripe size s and servers d_0..d_{n-1} is cut into stripe units
// of s bytes; unit u lives on server d_{u mod n} at object offset
// (u div n)*s. Each server's object is therefore dense: it holds the units it
// owns back to back, so an object's size follows from the file's size alone.
package layout

import (
	"errors"
	"fmt"
	"math"
)

// MaxObjectSize is the largest object an I/O server holds: writes and
// truncates past it fail with EFBIG there.
const MaxObjectSize = 1 << 62

// Limits on layouts. A stripe smaller than 4 KiB only adds round trips; one
// larger than 64 MiB would not fit the wire protocol's frames.
const (
	MinStripeSize = 4 << 10
	MaxStripeSize = 64 << 20
	MaxServers    = 256
	// MaxReplicas bounds the copies of a stripe unit.
	MaxReplicas = 5
	// DefaultStripeSize is PVFS2's default stripe unit.
	DefaultStripeSize = 64 << 10
)

// Layout says where a regular file's bytes live.
type Layout struct {
	// StripeSize is the stripe unit in bytes.
	StripeSize uint32
	// Servers are the I/O server IDs in stripe order; len(Servers) is the
	// stripe count. Servers[k] holds the first copy of column k.
	Servers []uint32
	// Replicas is how many copies each stripe unit has (0 means 1). Extra
	// are the servers of copies 2..R, column by column: column k's are
	// Extra[k*(R-1) : (k+1)*(R-1)]. Every copy of column k is the object
	// (inode, k) on its server.
	Replicas int
	Extra    []uint32
}

// Copies is the number of copies of each stripe unit (at least 1).
func (l Layout) Copies() int { return max(1, l.Replicas) }

// Column is the servers holding copies of column k, first copy first.
func (l Layout) Column(k int) []uint32 {
	r := l.Copies()
	col := make([]uint32, 0, r)
	col = append(col, l.Servers[k])
	return append(col, l.Extra[k*(r-1):(k+1)*(r-1)]...)
}

// Validate reports what is wrong with l, if anything.
func (l Layout) Validate() error {
	if err := ValidStripeSize(int64(l.StripeSize)); err != nil {
		return err
	}
	if len(l.Servers) == 0 {
		return errors.New("layout has no servers")
	}
	if len(l.Servers) > MaxServers {
		return fmt.Errorf("layout has %d servers, more than the limit of %d", len(l.Servers), MaxServers)
	}
	r := l.Copies()
	if r == 1 {
		// With copies, one server may hold objects of several columns (a
		// lost server's copies are made again on the others); without,
		// a server named twice is a placement bug.
		seen := make(map[uint32]bool, len(l.Servers))
		for _, s := range l.Servers {
			if seen[s] {
				return fmt.Errorf("layout names server %d twice", s)
			}
			seen[s] = true
		}
	}
	if r > MaxReplicas {
		return fmt.Errorf("layout has %d replicas, more than the limit of %d", r, MaxReplicas)
	}
	if len(l.Extra) != len(l.Servers)*(r-1) {
		return fmt.Errorf("layout with %d columns and %d replicas names %d extra servers, want %d", len(l.Servers), r, len(l.Extra), len(l.Servers)*(r-1))
	}
	for k := range l.Servers {
		col := l.Column(k)
		for i := range col {
			for j := range i {
				if col[i] == col[j] {
					return fmt.Errorf("layout puts two copies of column %d on server %d", k, col[i])
				}
			}
		}
	}
	return nil
}

// ValidStripeSize checks a stripe size against the limits.
func ValidStripeSize(s int64) error {
	if s < MinStripeSize || s > MaxStripeSize {
		return fmt.Errorf("stripe size %d out of range [%d, %d]", s, MinStripeSize, MaxStripeSize)
	}
	if s%512 != 0 {
		return fmt.Errorf("stripe size %d is not a multiple of 512", s)
	}
	return nil
}

// Locate maps a file offset to (index into Servers, offset inside that
// server's object).
func (l Layout) Locate(off int64) (server int, objOff int64) {
	s := int64(l.StripeSize)
	n := int64(len(l.Servers))
	unit := off / s
	return int(unit % n), (unit/n)*s + off%s
}

// ObjectSize is the size of server index k's object for a file of size size.
func (l Layout) ObjectSize(k int, size int64) int64 {
	s := int64(l.StripeSize)
	n := int64(len(l.Servers))
	full := size / (s * n)
	rem := size%(s*n) - int64(k)*s
	rem = max(0, min(rem, s))
	return full*s + rem
}

// MaxFileSize is the largest size a file of layout l can have: the size
// at which column 0's object (always the largest) reaches MaxObjectSize,
// capped at the largest int64 (sizes are int64 in clients and the kernel).
// A layout without servers counts as one column.
func (l Layout) MaxFileSize() int64 {
	s := int64(l.StripeSize)
	if s <= 0 {
		return MaxObjectSize
	}
	n := max(1, int64(len(l.Servers)))
	// Column 0 holds full = MaxObjectSize/s whole units of every stripe
	// row and, in the last row, at most MaxObjectSize%s bytes more: a
	// file reaching into column 1 of the next row would need a whole
	// unit in column 0 first.
	full, rest := int64(MaxObjectSize)/s, int64(MaxObjectSize)%s
	if full > (math.MaxInt64-rest)/(s*n) {
		return math.MaxInt64
	}
	return full*s*n + rest
}

// Chunk is one contiguous piece of a file range that lives on one server.
type Chunk struct {
	Server  int   // index into Layout.Servers
	ObjOff  int64 // offset inside the server's object
	FileOff int64 // offset in the file
	Len     int64
}

// Chunks splits the file range [off, off+n) into per-server pieces, in file
// order, each no longer than one stripe unit. Adjacent units on the same
// server are not merged: a unit is the natural request size.
func (l Layout) Chunks(off, n int64) []Chunk {
	if n <= 0 {
		return nil
	}
	s := int64(l.StripeSize)
	out := make([]Chunk, 0, n/s+2)
	for end := off + n; off < end; {
		k, obj := l.Locate(off)
		ln := min(s-off%s, end-off)
		out = append(out, Chunk{Server: k, ObjOff: obj, FileOff: off, Len: ln})
		off += ln
	}
	return out
}
