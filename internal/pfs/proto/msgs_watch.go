package proto

// newWatch returns an empty message for one of this file's ops, or nil.
func newWatch(op Op) Msg { return nil }
