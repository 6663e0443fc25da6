package iod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// DefaultGrace is how old an object must be before the start-up sweep may
// remove it when no file references it: younger ones may belong to a create
// still in progress elsewhere.
const DefaultGrace = time.Hour

// listLimit caps one ListObjects answer.
const listLimit = 4096

// parseObject turns an object's file name into its key. Index-less names
// on a legacy store may hold any stripe index.
func parseObject(name string, legacy bool) (proto.ObjRef, bool) {
	ino, idx, hasIdx := strings.Cut(name, ".")
	n, err := strconv.ParseUint(ino, 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != ino {
		return proto.ObjRef{}, false
	}
	r := proto.ObjRef{Ino: n}
	if hasIdx {
		k, err := strconv.ParseUint(idx, 10, 32)
		if err != nil || k == 0 || strconv.FormatUint(k, 10) != idx {
			return proto.ObjRef{}, false
		}
		r.Index = uint32(k)
	} else if legacy {
		r.Index = proto.AnyIndex
	}
	return r, true
}

// objects lists every object of the store, sorted by (Ino, Index).
func (s *Store) objects() ([]proto.ObjectInfo, error) {
	id, _ := s.identity()
	rs := s.readers()
	if len(rs) == 0 {
		return nil, errors.New("no data directory is current")
	}
	root := filepath.Join(s.members[rs[0]].dir, "objects")
	dirs, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []proto.ObjectInfo
	for _, d := range dirs {
		if !d.IsDir() || len(d.Name()) != 2 {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(root, d.Name()))
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			r, ok := parseObject(e.Name(), id.legacy)
			if !ok || !e.Type().IsRegular() || fmt.Sprintf("%02x", r.Ino&0xff) != d.Name() {
				continue // not an object: no request can reach it
			}
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			size := uint64(fi.Size())
			if s.mode == RAID0 {
				// The first directory holds every object's first blocks.
				idx := r.Index
				if idx == proto.AnyIndex {
					idx = 0
				}
				if n, ok, err := s.objSize(objKey{r.Ino, idx}); err == nil && ok {
					size = uint64(n)
				}
			}
			out = append(out, proto.ObjectInfo{ObjRef: r, Size: size, Mtime: fi.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(out, func(a, b proto.ObjectInfo) int { return cmpRef(a.ObjRef, b.ObjRef) })
	return out, nil
}

func cmpRef(a, b proto.ObjRef) int {
	switch {
	case a.Ino != b.Ino:
		if a.Ino < b.Ino {
			return -1
		}
		return 1
	case a.Index != b.Index:
		if a.Index < b.Index {
			return -1
		}
		return 1
	}
	return 0
}

func (s *Store) list(m *proto.ListObjects) (proto.Msg, error) {
	all, err := s.objects()
	if err != nil {
		return nil, err
	}
	if m.AfterSet {
		i, found := slices.BinarySearchFunc(all, m.After, func(o proto.ObjectInfo, r proto.ObjRef) int { return cmpRef(o.ObjRef, r) })
		if found {
			i++
		}
		all = all[i:]
	}
	limit := int(m.Limit)
	if limit <= 0 || limit > listLimit {
		limit = listLimit
	}
	r := &proto.ObjectsReply{}
	if len(all) > limit {
		all, r.More = all[:limit], true
	}
	r.Objs = all
	return r, nil
}

func (s *Store) identify(*proto.Identify) proto.Msg {
	id, _ := s.identity()
	st := proto.ServerDown
	if s.registered.Load() {
		st = proto.ServerUp
	}
	return &proto.ServersReply{Servers: []proto.ServerInfo{{ID: id.id, State: st, Base: id.base}}, Cluster: id.cluster}
}

// MetaCaller sends a request to the metadata leader (a *client.Client or
// *client.Leader).
type MetaCaller interface {
	Call(ctx context.Context, req proto.Msg) (proto.Msg, error)
}

// Unreferenced returns, of objs, those no file references according to the
// metadata service, asked in batches.
func Unreferenced(ctx context.Context, meta MetaCaller, server uint32, objs []proto.ObjectInfo) ([]proto.ObjectInfo, error) {
	var out []proto.ObjectInfo
	for len(objs) > 0 {
		n := min(len(objs), 1024)
		req := &proto.RefCheck{Server: server}
		for _, o := range objs[:n] {
			req.Objs = append(req.Objs, o.ObjRef)
		}
		r, err := meta.Call(ctx, req)
		if err != nil {
			return nil, err
		}
		rr, ok := r.(*proto.RefsReply)
		if !ok || len(rr.Used) != n {
			return nil, errors.New("metadata server: unexpected reply to a reference check")
		}
		for i, used := range rr.Used {
			if !used {
				out = append(out, objs[i])
			}
		}
		objs = objs[n:]
	}
	return out, nil
}

// sweep removes objects older than grace that no file references: left by
// a client that crashed between create and unlink, or by reclaims that never
// reached this server.
func (s *Store) sweep(ctx context.Context, meta MetaCaller, server uint32, grace time.Duration) {
	all, err := s.objects()
	if err != nil {
		s.log.Warn("sweep of unreferenced objects: cannot list", "err", err)
		return
	}
	cut := time.Now().Add(-grace).UnixNano()
	old := all[:0]
	for _, o := range all {
		if o.Mtime < cut {
			old = append(old, o)
		}
	}
	if len(old) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	gone, err := Unreferenced(cctx, meta, server, old)
	if err != nil {
		s.log.Warn("sweep of unreferenced objects: reference check failed", "err", err)
		return
	}
	var bytes uint64
	removed := 0
	for _, o := range gone {
		idx := o.Index
		if idx == proto.AnyIndex {
			idx = 0 // the legacy name is index 0's
		}
		if err := s.remove(objKey{o.Ino, idx}); err != nil {
			s.log.Warn("sweep: remove failed", "file", o.Ino, "stripe", idx, "err", err)
			continue
		}
		removed++
		bytes += o.Size
	}
	if removed > 0 {
		s.log.Info("swept objects no file references", "objects", removed, "bytes", bytes)
	}
}
