package director

import "time"

// ConnInfo is one entry of the connection table (corral ctl conns).
//
// Placeholder for the admin API; H1's conns.go (the real table) replaces
// this file at merge.
type ConnInfo struct {
	Service, Proto, Client, VIP, Real, State string
	Expires                                  time.Duration
}

// Conns lists the director's connections.
func (d *Director) Conns() []ConnInfo { return nil }
