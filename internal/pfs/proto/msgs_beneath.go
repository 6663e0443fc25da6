package proto

// OpWalkBeneath (39) belongs to this file.
const OpWalkBeneath Op = 39

// WalkBeneath resolves Path inside the directory Root, following symbolic
// links in every component including the last, as openat2's
// RESOLVE_BENEATH does: a ".." above Root or a link with an absolute
// target fails with EXDEV. A web node resolves a URL inside its domain's
// directory with it, in one round trip, so a link cannot serve a file
// from outside. Root itself is resolved as Walk does, and followed if it
// is a link (an alias domain).
type WalkBeneath struct{ Root, Path string }

func (*WalkBeneath) Op() Op          { return OpWalkBeneath }
func (m *WalkBeneath) Encode(e *Enc) { e.Str(m.Root); e.Str(m.Path) }
func (m *WalkBeneath) Decode(d *Dec) { m.Root = d.Str(); m.Path = d.Str() }
