package proto

// newMembers returns an empty message for one of this file's ops, or nil.
func newMembers(op Op) Msg { return nil }
