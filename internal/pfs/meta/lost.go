package meta

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// loseServer answers LoseServer: server m.ID is lost for good; its copies
// are made again on the others (rereplicate).
func (s *Service) loseServer(ctx context.Context, m *proto.LoseServer) (proto.Msg, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	si, ok := s.lookupServer(m.ID)
	if !ok {
		return nil, proto.Errorf(syscall.ENOENT, fmt.Sprintf("lose server: no I/O server %d (see `corral fs servers`)", m.ID))
	}
	if si.State == proto.ServerReplacing {
		return nil, proto.Errorf(syscall.EBUSY, fmt.Sprintf("lose server: I/O server %d is being replaced (its next empty disk is rebuilt); it cannot be lost now", m.ID))
	}
	if si.State != proto.ServerLost && s.probe(ctx, si.Addr, si.ID) {
		// Its next heartbeat would bring it back ("back with its objects").
		return nil, proto.Errorf(syscall.EBUSY, fmt.Sprintf("lose server: I/O server %d is up at %s with its objects; stop it before declaring it lost", si.ID, si.Addr))
	}
	if err := s.markLost(ctx, si, "declared lost (`corral fs servers lost`)"); err != nil {
		return nil, err
	}
	si, _ = s.lookupServer(m.ID)
	s.kickHealer()
	return &proto.ServersReply{Servers: []proto.ServerInfo{si}, Cluster: s.Cluster()}, nil
}

// checkLost marks lost the servers down longer than --lost-after (down
// since their last heartbeat this term, or since the term began).
func (s *Service) checkLost() {
	now := time.Now()
	term := time.Unix(0, s.leaderSince.Load())
	for _, si := range s.servers() {
		if si.State != proto.ServerDown {
			continue
		}
		since := term
		s.iodsMu.Lock()
		if h, ok := s.heard[si.ID]; ok {
			since = time.Unix(0, h)
		}
		s.iodsMu.Unlock()
		if now.Sub(since) < s.hl.lostAfter {
			continue
		}
		s.regMu.Lock()
		raw, ok := s.lookupServer(si.ID)
		var err error
		if ok && raw.State != proto.ServerLost && raw.State != proto.ServerReplacing && !s.upNow(si.ID) {
			ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
			err = s.markLost(ctx, raw, fmt.Sprintf("down for %s (--lost-after %s)", now.Sub(since).Round(time.Second), s.hl.lostAfter))
			cancel()
		}
		s.regMu.Unlock()
		if err != nil {
			s.log.Warn("mark a down I/O server lost", "id", si.ID, "err", err)
		}
	}
}

// upNow reports whether server id heartbeated within the live window.
func (s *Service) upNow(id uint32) bool {
	s.iodsMu.Lock()
	defer s.iodsMu.Unlock()
	h, ok := s.heard[id]
	return ok && time.Since(time.Unix(0, h)) < LiveWindow
}

// rereplicate scans the files of every lost server (copies move to other
// servers, stale whole there) and of every server being replaced (its
// copies become stale whole, rebuilt on the new disk once it registers).
// A finished scan is not repeated until the server's state changes.
func (s *Service) rereplicate() {
	all := s.servers()
	for _, si := range all {
		if si.State != proto.ServerLost && si.State != proto.ServerReplacing {
			s.hl.mu.Lock()
			delete(s.hl.scanned, si.ID) // back: a later loss scans again
			s.hl.mu.Unlock()
			continue
		}
		s.hl.mu.Lock()
		st, done := s.hl.scanned[si.ID]
		later := time.Now().Before(s.hl.rescan[si.ID])
		s.hl.mu.Unlock()
		if done && st == si.State || later {
			continue
		}
		if !s.scanServer(si, all) {
			continue // interrupted, or copies left without a server: the next pass starts over
		}
		s.hl.mu.Lock()
		s.hl.scanned[si.ID] = si.State
		s.hl.mu.Unlock()
	}
}

// chooser picks replacement servers: usable, not in the column, in a zone
// the column's other copies are not in when possible, the least chosen so
// far (then the most free) so that new copies spread over all servers.
type chooser struct {
	up     []proto.ServerInfo
	chosen map[uint32]int
}

func newChooser(all []proto.ServerInfo) *chooser {
	c := &chooser{chosen: map[uint32]int{}}
	for _, si := range all {
		if si.State == proto.ServerUp {
			c.up = append(c.up, si)
		}
	}
	return c
}

func (c *chooser) zone(id uint32) string {
	for _, si := range c.up {
		if si.ID == id {
			return si.Zone
		}
	}
	return ""
}

func (c *chooser) pick(col []uint32, lost uint32) (uint32, bool) {
	zones := map[string]bool{}
	for _, id := range col {
		if id != lost {
			if z := c.zone(id); z != "" {
				zones[z] = true
			}
		}
	}
	var best *proto.ServerInfo
	better := func(a, b *proto.ServerInfo) bool {
		az, bz := a.Zone != "" && zones[a.Zone], b.Zone != "" && zones[b.Zone]
		if az != bz {
			return !az
		}
		if c.chosen[a.ID] != c.chosen[b.ID] {
			return c.chosen[a.ID] < c.chosen[b.ID]
		}
		if a.Free != b.Free {
			return a.Free > b.Free
		}
		return a.ID < b.ID
	}
	for i := range c.up {
		si := &c.up[i]
		if slices.Contains(col, si.ID) {
			continue
		}
		if best == nil || better(si, best) {
			best = si
		}
	}
	if best == nil {
		return 0, false
	}
	c.chosen[best.ID]++
	return best.ID, true
}

// scanServer walks every file in batches for copies on server gone; false
// if it stopped before the end.
func (s *Service) scanServer(gone proto.ServerInfo, all []proto.ServerInfo) bool {
	lost := gone.State == proto.ServerLost
	what := "re-replicate"
	if !lost {
		what = "rebuild"
	}
	start := time.Now()
	ch := newChooser(all)
	goneIDs := map[uint32]bool{}
	for _, si := range all {
		if si.State == proto.ServerLost || si.State == proto.ServerReplacing {
			goneIDs[si.ID] = true
		}
	}
	type fix struct {
		ino     uint64
		triples []uint32
	}
	var after uint64
	var scanned, moved, noSource, noServer int
	for range 1 << 30 {
		var fixes []fix
		n := 0
		s.view(func(t tx) error {
			c := t.Bucket(bInode).Cursor()
			for k, v := c.Seek(u64key(after + 1)); k != nil && n < healBatch; k, v = c.Next() {
				n++
				after = binary.BigEndian.Uint64(k)
				ino, err := decodeInode(v)
				if err != nil || !ino.isReg() || !slices.Contains(ino.Servers, gone.ID) && !slices.Contains(ino.Extra, gone.ID) {
					continue
				}
				var f fix
				for k := range ino.Servers {
					col, err := column(ino, uint32(k))
					if err != nil || !slices.Contains(col, gone.ID) {
						continue
					}
					source := false
					for _, id := range col {
						source = source || !goneIDs[id]
					}
					if !source {
						noSource++
						if noSource <= 10 {
							s.log.Error("file with no copy left: reads of it fail (EIO)", "ino", ino.Ino, "column", k, "copies", col)
						}
						continue
					}
					nw := gone.ID
					if lost {
						var ok bool
						if nw, ok = ch.pick(col, gone.ID); !ok {
							noServer++
							continue
						}
					}
					f.triples = append(f.triples, uint32(k), gone.ID, nw)
				}
				if len(f.triples) > 0 {
					f.ino = ino.Ino
					fixes = append(fixes, f)
				}
			}
			return nil
		})
		scanned += n
		if cur, ok := s.lookupServer(gone.ID); lost && (!ok || cur.State != proto.ServerLost) {
			s.log.Info("re-replication stopped: the I/O server is back", "server", gone.ID, "files_scanned", scanned, "copies", moved)
			return false
		}
		for _, f := range fixes {
			if s.leaderSince.Load() == 0 {
				return false
			}
			ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
			_, err := s.propose(ctx, &command{Kind: cmdReplaceCopy, Ino: f.ino, Left: f.triples})
			cancel()
			if err != nil {
				s.log.Warn(what+": record new copies", "server", gone.ID, "ino", f.ino, "err", err)
				return false
			}
			moved += len(f.triples) / 3
		}
		if n < healBatch {
			break
		}
		if scanned%(healBatch*40) == 0 {
			s.log.Info(what+": scanning files", "server", gone.ID, "files_scanned", scanned, "copies", moved)
		}
	}
	if moved > 0 || noSource > 0 || noServer > 0 {
		s.log.Info(what+" scan done", "server", gone.ID, "files_scanned", scanned, "copies", moved,
			"files_without_copy", noSource, "copies_without_server", noServer, "took", time.Since(start).Round(time.Millisecond))
	}
	if noServer > 0 {
		// Retry once more servers may be up; not every pass: a scan reads
		// every inode.
		s.hl.mu.Lock()
		s.hl.rescan[gone.ID] = time.Now().Add(time.Minute)
		s.hl.mu.Unlock()
		return false
	}
	s.kickHealer()
	return true
}
