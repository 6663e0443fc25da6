package meta

import (
	"cmp"
	"fmt"
	"slices"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// dirPolicy is what new files in a directory take, each field from the
// nearest directory that sets it (0: none does).
type dirPolicy struct {
	size, count, replicas uint32
	placement             uint8
}

func (p dirPolicy) complete() bool {
	return p.size != 0 && p.count != 0 && p.replicas != 0 && p.placement != 0
}

// policy is the layout new files in directory d take, field by field from
// the nearest directory up to the root that sets it. It is resolved at each
// create, so a policy set on /www later applies to every directory below it
// that sets none of its own.
func (t tx) policy(d *inode) (dirPolicy, error) {
	var p dirPolicy
	for depth := 0; ; depth++ {
		p.size, p.count = cmp.Or(p.size, d.StripeSize), cmp.Or(p.count, d.StripeCount)
		p.replicas, p.placement = cmp.Or(p.replicas, d.Replicas), cmp.Or(p.placement, d.Placement)
		if p.complete() || d.Ino == RootIno || depth > maxDepth {
			return p, nil
		}
		var err error
		if d, err = t.inode(d.Parent); err != nil {
			return dirPolicy{}, err
		}
	}
}

// maxDepth bounds policy's walk up should parent pointers ever loop.
const maxDepth = 4096

// placement puts the leader's placement decision into a create: the usable
// servers, the first one rotating so that files spread over all servers
// even when each has one stripe, their zones, and the order of whole-file
// placement (least loaded first). The create's apply decides from these
// alone, so every member places alike.
func (s *Service) placement(c *command) {
	all := s.servers()
	live := usable(all)
	c.Registered = uint32(len(all))
	if len(live) < len(all) {
		c.Summary = stateSummary(all) // all up: pick says so itself
	}
	if len(live) == 0 {
		return
	}
	info := make(map[uint32]proto.ServerInfo, len(all))
	for _, si := range all {
		info[si.ID] = si
	}
	start := int(s.rot.Add(1))
	c.Picked = make([]uint32, len(live))
	c.Zones = make([]string, len(live))
	for i := range live {
		c.Picked[i] = live[(start+i)%len(live)]
		c.Zones[i] = info[c.Picked[i]].Zone
	}
	// Whole files go to the server with the most free space (in whole
	// GiB: free space changes only at heartbeats, and finer it would send
	// every file until the next one to the same server), then the least
	// I/O; ties keep the rotation, so like servers take turns.
	c.Whole = slices.Clone(c.Picked)
	slices.SortStableFunc(c.Whole, func(a, b uint32) int {
		x, y := info[a], info[b]
		return cmp.Or(cmp.Compare(y.Free>>30, x.Free>>30), cmp.Compare(x.Load, y.Load))
	})
}

// defaultReplicas is the copies of a file when neither the request nor a
// directory says: 2 once two servers can hold them.
func defaultReplicas(usable int) int {
	if usable >= 2 {
		return 2
	}
	return 1
}

// zoneKey is the failure domain of server id: its zone, or the server
// alone when it names none.
func zoneKey(zone string, id uint32) string {
	if zone == "" {
		return fmt.Sprintf("\x00%d", id)
	}
	return zone
}

// place lays out a new file from the leader's decision: count columns (0
// or AllServers: every usable server; whole: 1) of replicas copies each.
// It returns the first copies (Attr.Servers) and the others (Attr.Extra).
func (c *command) place(count, replicas int, whole bool) (servers, extra []uint32, err error) {
	if len(c.Picked) > 0 && replicas > len(c.Picked) {
		summary := c.Summary
		if summary == "" {
			summary = fmt.Sprintf("%d %s", len(c.Picked), proto.StateName(proto.ServerUp))
		}
		return nil, nil, proto.Errorf(syscall.ENOSPC, fmt.Sprintf("%d replicas, but only %d I/O servers are usable: %s (each copy of a stripe unit needs its own server; use at most %d replicas)",
			replicas, len(c.Picked), summary, len(c.Picked)))
	}
	zone := map[uint32]string{}
	for i, id := range c.Picked {
		z := ""
		if len(c.Zones) == len(c.Picked) {
			z = c.Zones[i]
		}
		zone[id] = zoneKey(z, id)
	}
	if whole {
		order := c.Whole
		if len(order) != len(c.Picked) {
			order = c.Picked // a command without the order: rotation
		}
		if servers, err = c.pick(1); err != nil {
			return nil, nil, err
		}
		servers[0] = order[0]
		return servers, wholeCopies(order, replicas, zone), nil
	}
	if servers, err = c.pick(count); err != nil {
		return nil, nil, err
	}
	return servers, c.stripedCopies(servers, replicas, zone), nil
}

// wholeCopies picks copies 2..R of a whole file: the next least loaded
// servers, those in zones not yet used first.
func wholeCopies(order []uint32, replicas int, zone map[uint32]string) []uint32 {
	col := []uint32{order[0]}
	used := map[string]bool{zone[order[0]]: true}
	for _, newZone := range []bool{true, false} {
		for _, id := range order[1:] {
			if len(col) == replicas {
				break
			}
			if slices.Contains(col, id) || newZone && used[zone[id]] {
				continue
			}
			col = append(col, id)
			used[zone[id]] = true
		}
	}
	return col[1:]
}

// stripedCopies picks copies 2..R of each column: on servers not in the
// column, in a zone the column does not use yet when there is one (else
// any other server: zones never make a create fail), the server with the
// fewest copies of this file so far, then the one nearest to copy j's
// anchor, n*j/R places after the column's first copy in the rotation, so
// that over many files every server gets a like share of copies.
func (c *command) stripedCopies(servers []uint32, replicas int, zone map[uint32]string) []uint32 {
	if replicas <= 1 {
		return nil
	}
	live := c.Picked
	n := len(live)
	copies := make(map[uint32]int, n)
	for _, id := range servers {
		copies[id]++
	}
	extra := make([]uint32, 0, len(servers)*(replicas-1))
	for k, first := range servers {
		col := []uint32{first}
		used := map[string]bool{zone[first]: true}
		for j := 1; j < replicas; j++ {
			anchor := k + n*j/replicas
			best, bestNew, bestDist := uint32(0), false, 0
			for i, id := range live {
				if slices.Contains(col, id) {
					continue
				}
				isNew, dist := !used[zone[id]], ((i-anchor)%n+n)%n
				better := best == 0 ||
					isNew && !bestNew ||
					isNew == bestNew && (copies[id] < copies[best] || copies[id] == copies[best] && dist < bestDist)
				if better {
					best, bestNew, bestDist = id, isNew, dist
				}
			}
			col = append(col, best)
			used[zone[best]] = true
			copies[best]++
		}
		extra = append(extra, col[1:]...)
	}
	return extra
}

// checkReplicas validates a replica count of a request (0: not set).
func checkReplicas(r uint32, what string) error {
	if r > layout.MaxReplicas {
		return proto.Errorf(syscall.EINVAL, fmt.Sprintf("%s: %d replicas out of range 1..%d", what, r, layout.MaxReplicas))
	}
	return nil
}

// checkPlacement validates a placement policy of a request.
func checkPlacement(p uint8, what string) error {
	switch p {
	case proto.PlaceInherit, proto.PlaceStriped, proto.PlaceWhole:
		return nil
	}
	return proto.Errorf(syscall.EINVAL, fmt.Sprintf("%s: unknown placement %d (1 striped, 2 whole)", what, p))
}
