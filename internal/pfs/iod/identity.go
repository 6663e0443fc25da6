package iod

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/safefile"
)

// A data directory carries its identity twice: DATA/identity (cluster and
// server ID, written at the first registration) and the store marker
// DATA/objects/STORE (the same plus the store's base inode number). The
// marker lives inside objects/ so that a wiped objects directory is told
// apart from an intact one: an I/O server whose marker is missing registers
// as Fresh, and the metadata server then knows its objects are gone.
const (
	identityFile = "identity"
	markerFile   = "STORE"
	legacyIDFile = "id" // before identities: the server ID alone, 4 bytes
)

// identity is what a data directory says about itself.
type identity struct {
	cluster string
	id      uint32
	base    uint64 // marker only
	legacy  bool   // marker only: objects may carry names without an index
}

func parseIdentity(b []byte) (identity, error) {
	var id identity
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "cluster":
			id.cluster = v
		case "server":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 32)
			id.id = uint32(n)
		case "base":
			id.base, err = strconv.ParseUint(v, 10, 64)
		case "legacy":
			id.legacy = v == "1"
		}
		if err != nil {
			return id, fmt.Errorf("bad %s %q", k, v)
		}
	}
	if id.cluster == "" || id.id == 0 {
		return id, errors.New("cluster or server missing")
	}
	return id, nil
}

func (id identity) text(marker bool) []byte {
	s := fmt.Sprintf("# corral I/O server identity: do not copy to another server\ncluster %s\nserver %d\n", id.cluster, id.id)
	if marker {
		l := 0
		if id.legacy {
			l = 1
		}
		s += fmt.Sprintf("base %d\nlegacy %d\n", id.base, l)
	}
	return []byte(s)
}

// loadIdentity reads the identity and the store marker at open.
func (s *Store) loadIdentity() error {
	var ident, mark identity
	haveIdent, haveMark := false, false
	if b, err := os.ReadFile(filepath.Join(s.dir, identityFile)); err == nil {
		if ident, err = parseIdentity(b); err != nil {
			return fmt.Errorf("%s: %v", filepath.Join(s.dir, identityFile), err)
		}
		haveIdent = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, "objects", markerFile)); err == nil {
		if mark, err = parseIdentity(b); err != nil {
			return fmt.Errorf("%s: %v", filepath.Join(s.dir, "objects", markerFile), err)
		}
		haveMark = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	switch {
	case haveIdent && haveMark:
		if ident.cluster != mark.cluster || ident.id != mark.id {
			return fmt.Errorf("%s: identity (cluster %s, server %d) and objects/%s (cluster %s, server %d) disagree: the objects directory comes from another server",
				s.dir, ident.cluster, ident.id, markerFile, mark.cluster, mark.id)
		}
		s.ident = mark
	case haveMark:
		s.ident = mark // identity file lost: the marker says the same
	case haveIdent:
		// Objects directory wiped (or replaced): its objects are gone.
		s.ident = ident
		s.fresh = true
	default:
		if b, err := os.ReadFile(filepath.Join(s.dir, legacyIDFile)); err == nil && len(b) == 4 {
			// A directory from before identities: adopted at the first
			// registration, its objects taken as intact.
			s.ident = identity{id: uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), legacy: true}
		} else {
			s.fresh = true
		}
	}
	return nil
}

// adopt records what the metadata server answered to a registration.
func (s *Store) adopt(cluster string, si proto.ServerInfo) error {
	s.identMu.Lock()
	defer s.identMu.Unlock()
	if s.ident.cluster == cluster && s.ident.id == si.ID && !s.fresh && s.markerOK {
		return nil
	}
	next := identity{cluster: cluster, id: si.ID, base: s.ident.base, legacy: s.ident.legacy}
	if s.fresh {
		next.base, next.legacy = si.Base, false
	}
	if err := safefile.WriteSecret(filepath.Join(s.dir, "objects", markerFile), next.text(true)); err != nil {
		return err
	}
	if err := safefile.WriteSecret(filepath.Join(s.dir, identityFile), next.text(false)); err != nil {
		return err
	}
	s.ident, s.fresh, s.markerOK = next, false, true
	return nil
}

func (s *Store) identity() (identity, bool) {
	s.identMu.Lock()
	defer s.identMu.Unlock()
	return s.ident, s.fresh
}

// register announces the server to meta and adopts the identity it answers.
// meta sends it to whichever metadata member leads.
func (s *Store) register(ctx context.Context, meta *client.Leader, addr string) (uint32, error) {
	c, f := s.usage()
	id, fresh := s.identity()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := meta.Call(cctx, &proto.Register{ID: id.id, Addr: addr, Capacity: c, Free: f, Cluster: id.cluster, Fresh: fresh,
		Zone: s.r.zone, Load: s.r.load.kibps(time.Now())})
	if err != nil {
		var re *proto.RemoteError
		if errors.As(err, &re) && re.Errno == syscall.EAGAIN {
			// Meta refuses this server (lost: its copies may live elsewhere
			// now): a heartbeat refused stops it serving its objects (EIO)
			// until meta accepts it again.
			s.registered.Store(false)
		}
		return 0, err
	}
	sr, ok := r.(*proto.ServersReply)
	if !ok || len(sr.Servers) != 1 || sr.Servers[0].ID == 0 || sr.Cluster == "" {
		return 0, fmt.Errorf("metadata server %s: unexpected reply to register", meta.Current())
	}
	if err := s.adopt(sr.Cluster, sr.Servers[0]); err != nil {
		return 0, fmt.Errorf("record identity in %s: %w", s.dir, err)
	}
	s.registered.Store(true)
	return sr.Servers[0].ID, nil
}

// fatalRegister reports whether a refused registration is a configuration
// error that waiting will not cure: the directory belongs to another cluster
// or server, or the address to another server.
func fatalRegister(err error) bool {
	if errors.Is(err, proto.ErrAuth) {
		return true // a wrong or missing secret does not heal by waiting
	}
	var re *proto.RemoteError
	if !errors.As(err, &re) {
		return false
	}
	switch re.Errno {
	case syscall.EXDEV, syscall.EEXIST, syscall.ENOENT, syscall.EINVAL:
		return true
	}
	return false
}

// registerLoop registers until it succeeds, waiting with backoff while meta
// is unreachable or refuses for now (a lost server awaiting `corral fs
// servers replace`). It gives up only on ctx or a configuration error.
func (s *Store) registerLoop(ctx context.Context, meta *client.Leader, addr string) (uint32, error) {
	wait := 100 * time.Millisecond
	lastMsg := ""
	for {
		id, err := s.register(ctx, meta, addr)
		if err == nil {
			if lastMsg != "" {
				s.log.Info("registered with the metadata server", "meta", meta.Current(), "id", id)
			}
			return id, nil
		}
		if fatalRegister(err) {
			return 0, err
		}
		msg := "waiting for meta at " + strings.Join(meta.Members(), ",")
		var re *proto.RemoteError
		if errors.As(err, &re) {
			msg = "metadata server refuses registration for now; retrying"
		}
		if msg != lastMsg {
			s.log.Warn(msg, "err", err)
			lastMsg = msg
		} else {
			s.log.Debug(msg, "err", err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 3*time.Second)
	}
}
