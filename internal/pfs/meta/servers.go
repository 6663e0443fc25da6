package meta

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// DefaultReserve is the percentage of an I/O server's capacity kept free by
// default: below it the server is full and gets no new files.
const DefaultReserve = 5.0

var kCluster = []byte("cluster")

// newClusterID makes a cluster ID for a new store. Every I/O server keeps
// it in its data directory, so a directory of another file system is
// recognised.
func newClusterID() (string, error) {
	r := make([]byte, 8)
	if _, err := rand.Read(r); err != nil {
		return "", err
	}
	return hex.EncodeToString(r), nil
}

// Cluster is the file system's cluster ID ("" until the leader of a new
// store has made one).
func (s *Service) Cluster() string {
	s.clusterMu.Lock()
	defer s.clusterMu.Unlock()
	if s.cluster == "" {
		s.m.view(func(btx *bolt.Tx) error {
			s.cluster = string(btx.Bucket(bSys).Get(kCluster))
			return nil
		})
	}
	return s.cluster
}

// usable returns the IDs of the servers new files may use: up, with free
// space above the reserve.
func usable(all []proto.ServerInfo) []uint32 {
	var out []uint32
	for _, si := range all {
		if si.State == proto.ServerUp {
			out = append(out, si.ID)
		}
	}
	return out
}

// stateSummary says how many servers are in each state, e.g. "2 up, 1 down".
func stateSummary(all []proto.ServerInfo) string {
	n := map[uint8]int{}
	for _, si := range all {
		n[si.State]++
	}
	var parts []string
	for _, st := range []uint8{proto.ServerUp, proto.ServerFull, proto.ServerDown, proto.ServerLost, proto.ServerReplacing} {
		if n[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[st], proto.StateName(st)))
		}
	}
	return strings.Join(parts, ", ")
}

// awaitServers gives I/O servers one heartbeat to announce themselves after
// this member became the leader (at a start, or after a leader change), so that a create right after a restart does
// not fail only because no heartbeat has arrived yet.
func (s *Service) awaitServers(ctx context.Context) {
	deadline := time.Unix(0, s.leaderSince.Load()).Add(2*iodHeartbeat + time.Second)
	for time.Now().Before(deadline) && len(usable(s.servers())) == 0 {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// iodHeartbeat is the I/O servers' default heartbeat (iod.Heartbeat; not
// imported to keep the packages apart).
const iodHeartbeat = 5 * time.Second

// heardSince reports whether server id has registered since this start.
func (s *Service) heardSince(id uint32) bool {
	s.iodsMu.Lock()
	defer s.iodsMu.Unlock()
	_, ok := s.heard[id]
	return ok
}

func (s *Service) lookupServer(id uint32) (proto.ServerInfo, bool) {
	s.iodsMu.Lock()
	defer s.iodsMu.Unlock()
	si, ok := s.iods[id]
	return si, ok
}

// owner returns the known server registered at addr other than self.
func (s *Service) owner(addr string, self uint32) (proto.ServerInfo, bool) {
	s.iodsMu.Lock()
	defer s.iodsMu.Unlock()
	for _, si := range s.iods {
		if si.Addr == addr && si.ID != self {
			return si, true
		}
	}
	return proto.ServerInfo{}, false
}

// probe asks the process at addr who it is. It reports whether server id of
// this cluster answers there, registered and serving.
func (s *Service) probe(ctx context.Context, addr string, id uint32) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := s.pool.Call(cctx, addr, &proto.Identify{})
	if err != nil {
		return false
	}
	sr, ok := r.(*proto.ServersReply)
	return ok && len(sr.Servers) == 1 && sr.Servers[0].ID == id && sr.Cluster == s.Cluster() && sr.Servers[0].State == proto.ServerUp
}

// persistServer stores si (with its persistent state) and updates memory.
// base, if set, stamps si.Base with the next inode number: the store being
// accepted holds no object of any older file.
func (s *Service) persistServer(ctx context.Context, si *proto.ServerInfo, newID, base bool) error {
	r, err := s.propose(ctx, &command{Kind: cmdServer, Server: *si, NewID: newID, Base: base})
	if err != nil {
		return err
	}
	sr, ok := r.(*proto.ServersReply)
	if !ok || len(sr.Servers) != 1 {
		return fmt.Errorf("store I/O server %d: the state machine answered %T", si.ID, r)
	}
	*si = sr.Servers[0] // the hook put it in s.iods on apply
	return nil
}

// markLost records that server id's objects are gone.
func (s *Service) markLost(ctx context.Context, si proto.ServerInfo, why string) error {
	if si.State == proto.ServerLost {
		return nil
	}
	si.State = proto.ServerLost
	if err := s.persistServer(ctx, &si, false, false); err != nil {
		return err
	}
	s.log.Error("I/O server lost: kept out of placement; copies of replicated files on it are made again on the others, other data it held read EIO until `corral fs servers replace`",
		"id", si.ID, "addr", si.Addr, "why", why)
	return nil
}

func (s *Service) reply(si proto.ServerInfo) *proto.ServersReply {
	s.iodsMu.Lock()
	s.heard[si.ID] = time.Now().UnixNano()
	s.iodsMu.Unlock()
	return &proto.ServersReply{Servers: []proto.ServerInfo{si}, Cluster: s.Cluster()}
}

// register records an I/O server, handing out an ID on first contact, and
// checks its identity: a data directory of another cluster, an address of
// another server, or a known server back without its objects is refused
// with an error that says what to do.
func (s *Service) register(ctx context.Context, m *proto.Register) (proto.Msg, error) {
	if _, _, err := net.SplitHostPort(m.Addr); err != nil {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("register: bad address %q: %v", m.Addr, err))
	}
	if m.Cluster != "" && m.Cluster != s.Cluster() {
		return nil, proto.Errorf(syscall.EXDEV, fmt.Sprintf("register: the data directory of I/O server %d at %s belongs to cluster %s, but this metadata server is cluster %s: point the iod at its own cluster's metadata server (--meta), or give it an empty --data directory to join this one",
			m.ID, m.Addr, m.Cluster, s.Cluster()))
	}
	now := time.Now().UnixNano()
	s.regMu.Lock()
	defer s.regMu.Unlock()

	if m.ID == 0 {
		si := proto.ServerInfo{Addr: m.Addr, Capacity: m.Capacity, Free: m.Free, Seen: now, Zone: m.Zone, Load: m.Load}
		if x, ok := s.owner(m.Addr, 0); ok {
			if x.State == proto.ServerReplacing {
				si.ID = x.ID
				if err := s.persistServer(ctx, &si, false, true); err != nil {
					return nil, err
				}
				s.log.Info("I/O server replaced: empty disk accepted", "id", si.ID, "addr", si.Addr, "base_ino", si.Base)
				return s.reply(si), nil
			}
			if s.probe(ctx, m.Addr, x.ID) {
				return nil, proto.Errorf(syscall.EEXIST, fmt.Sprintf("register: address %s is served by I/O server %d, which is up; this iod (empty data directory) cannot take it: give it its own --listen/--advertise address",
					m.Addr, x.ID))
			}
			if err := s.markLost(ctx, x, "an iod with an empty data directory registered at its address"); err != nil {
				return nil, err
			}
			return nil, proto.Errorf(syscall.EAGAIN, fmt.Sprintf("register: address %s belongs to I/O server %d, but this iod's data directory is empty: server %d's objects are gone, so it is now marked lost (no new files; reads of its data fail with EIO). If its disk was replaced, run `corral fs servers replace %d` and this iod takes it over; if this is meant to be a new server, give it another address",
				m.Addr, x.ID, x.ID, x.ID))
		}
		if err := s.persistServer(ctx, &si, true, true); err != nil {
			return nil, err
		}
		s.log.Info("I/O server registered", "id", si.ID, "addr", si.Addr)
		return s.reply(si), nil
	}

	cur, known := s.lookupServer(m.ID)
	if !known {
		return nil, proto.Errorf(syscall.ENOENT, fmt.Sprintf("register: I/O server id %d is unknown to this metadata server (cluster %s); was its data directory made for another file system?", m.ID, s.Cluster()))
	}
	if cur.Addr != m.Addr {
		if x, ok := s.owner(m.Addr, m.ID); ok {
			return nil, proto.Errorf(syscall.EEXIST, fmt.Sprintf("register: I/O server %d registers at %s, which belongs to I/O server %d: each server needs its own address (if server %d is gone for good, keep the new one on its old address %s)",
				m.ID, m.Addr, x.ID, x.ID, cur.Addr))
		}
	} else if !s.heardSince(m.ID) {
		// Stores from before identity checks may list a second ID at this
		// address (an iod restarted on an empty directory got a new one):
		// the older ID's objects are gone, whatever serves here now.
		for _, x := range s.servers() {
			if x.ID != m.ID && x.Addr == m.Addr && x.State != proto.ServerLost {
				raw, _ := s.lookupServer(x.ID)
				if err := s.markLost(ctx, raw, fmt.Sprintf("its address %s is served by I/O server %d", m.Addr, m.ID)); err != nil {
					return nil, err
				}
			}
		}
	}
	si := cur
	si.Addr, si.Capacity, si.Free, si.Seen = m.Addr, m.Capacity, m.Free, now
	si.Zone, si.Load = m.Zone, m.Load
	switch {
	case m.Fresh && cur.State == proto.ServerReplacing:
		si.State = 0
		if err := s.persistServer(ctx, &si, false, true); err != nil {
			return nil, err
		}
		s.log.Info("I/O server replaced: empty objects directory accepted", "id", si.ID, "addr", si.Addr, "base_ino", si.Base)
		return s.reply(si), nil
	case m.Fresh:
		if err := s.markLost(ctx, cur, "its objects directory is empty or was wiped"); err != nil {
			return nil, err
		}
		return nil, proto.Errorf(syscall.EAGAIN, fmt.Sprintf("register: I/O server %d at %s came back with an empty objects directory: its objects are gone, so it is marked lost (no new files; reads of its data fail with EIO). To accept this disk as server %d, run `corral fs servers replace %d`",
			m.ID, m.Addr, m.ID, m.ID))
	case cur.State == proto.ServerLost:
		// Its copies were made again elsewhere (rereplicate), but clients
		// holding the old layout would still send it writes that the new
		// copies never get, and heal would call both current: it comes
		// back only as an empty disk.
		s.log.Warn("I/O server declared lost came back with its old objects: refused; its copies were made again elsewhere, so wipe its data directory and run `corral fs servers replace`",
			"id", m.ID, "addr", m.Addr)
		return nil, proto.Errorf(syscall.EAGAIN, fmt.Sprintf("register: I/O server %d at %s was declared lost and its copies were made again elsewhere; it cannot come back with its old objects (clients and heal would take them for current). Wipe its data directory, restart it and run `corral fs servers replace %d`",
			m.ID, m.Addr, m.ID))
	case cur.State == proto.ServerReplacing:
		si.State = 0
		if err := s.persistServer(ctx, &si, false, false); err != nil {
			return nil, err
		}
		s.log.Info("I/O server back with its objects", "id", si.ID, "addr", si.Addr)
		return s.reply(si), nil
	}
	if cur.Addr == m.Addr && m.Cluster != "" && cur.Zone == m.Zone {
		// A heartbeat: keep it in memory, no disk write (a new zone is
		// stored: every member places by it after a leader change).
		s.iodsMu.Lock()
		s.iods[m.ID] = si
		s.iodsMu.Unlock()
		return s.reply(si), nil
	}
	if cur.Addr != m.Addr && s.probe(ctx, cur.Addr, m.ID) {
		return nil, proto.Errorf(syscall.EEXIST, fmt.Sprintf("register: I/O server %d is already up at %s; the iod registering at %s has a copy of its data directory: give it an empty --data directory",
			m.ID, cur.Addr, m.Addr))
	}
	if err := s.persistServer(ctx, &si, false, false); err != nil {
		return nil, err
	}
	if m.Cluster == "" {
		s.log.Info("I/O server registered; its data directory now records this cluster", "id", si.ID, "addr", si.Addr, "cluster", s.Cluster())
	} else {
		s.log.Info("I/O server registered", "id", si.ID, "addr", si.Addr)
	}
	return s.reply(si), nil
}

// replace accepts the next empty disk registering at server m.ID's address
// (or as m.ID with a wiped objects directory) as that server.
func (s *Service) replace(ctx context.Context, m *proto.ReplaceServer) (proto.Msg, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	si, ok := s.lookupServer(m.ID)
	if !ok {
		return nil, proto.Errorf(syscall.ENOENT, fmt.Sprintf("replace: no I/O server %d (see `corral fs servers`)", m.ID))
	}
	if si.State != proto.ServerLost && si.State != proto.ServerReplacing && s.probe(ctx, si.Addr, si.ID) {
		return nil, proto.Errorf(syscall.EBUSY, fmt.Sprintf("replace: I/O server %d is up at %s with its objects; stop it before replacing its disk", si.ID, si.Addr))
	}
	si.State = proto.ServerReplacing
	if err := s.persistServer(ctx, &si, false, false); err != nil {
		return nil, err
	}
	s.log.Warn("I/O server to be replaced: the next empty disk at its address takes it over; data it held are lost", "id", si.ID, "addr", si.Addr)
	s.kickHealer() // its copies become stale whole: rebuilt from the others
	return &proto.ServersReply{Servers: []proto.ServerInfo{si}, Cluster: s.Cluster()}, nil
}

// refCheck says which objects stored on server m.Server a file references.
func (s *Service) refCheck(m *proto.RefCheck) (proto.Msg, error) {
	r := &proto.RefsReply{Used: make([]bool, len(m.Objs))}
	err := s.view(func(t tx) error {
		for i, o := range m.Objs {
			n, err := t.inode(o.Ino)
			if err != nil {
				var re *proto.RemoteError
				if errors.As(err, &re) && re.Errno == syscall.ENOENT {
					// No such file: unreferenced, unless reserved (its
					// client may have written it ahead of the create).
					rv, rerr := t.reservation(o.Ino)
					if rerr != nil {
						return rerr
					}
					if rv != nil {
						r.Used[i] = holds(&inode{Attr: rv.attr}, m.Server, o.Index)
					}
					continue
				}
				return err // a record we cannot read: say nothing is garbage
			}
			if !n.isReg() {
				continue
			}
			r.Used[i] = holds(n, m.Server, o.Index)
		}
		return nil
	})
	return r, err
}

// holds reports whether file n keeps an object (n, index) on server id:
// id holds a copy of column index (any column for AnyIndex).
func holds(n *inode, id, index uint32) bool {
	l := replicaLayout(n)
	if len(l.Extra) != len(l.Servers)*(l.Copies()-1) {
		// Extras that do not fit the columns (a record being repaired?):
		// a server named in them keeps every object of the file, since
		// wrongly calling an object garbage loses data.
		if slices.Contains(n.Extra, id) {
			return true
		}
		l.Replicas, l.Extra = 1, nil
	}
	for k := range l.Servers {
		if index != proto.AnyIndex && uint32(k) != index {
			continue
		}
		if slices.Contains(l.Column(k), id) {
			return true
		}
	}
	return false
}
