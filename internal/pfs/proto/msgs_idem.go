package proto

// newIdem returns an empty message for one of this file's ops, or nil.
func newIdem(op Op) Msg { return nil }
