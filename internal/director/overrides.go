package director

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/corral-cluster/corral/internal/safefile"
)

// Run-time weights (ctl drain, ctl weight) outlive the process: a drain
// that a restart (kill -9, a rolling upgrade) silently undid would send
// connections to a node the operator took out. They are kept in a file
// beside the admin token, written atomically on each change and applied
// to every configuration the director takes, until ctl enable.

// OverridesFile is where a director whose admin token is in tokenFile
// keeps its run-time weights: beside it, named after it.
func OverridesFile(tokenFile string) string {
	base := strings.TrimSuffix(filepath.Base(tokenFile), ".token")
	return filepath.Join(filepath.Dir(tokenFile), base+".overrides.json")
}

// overrideEntry is one run-time weight in the file.
type overrideEntry struct {
	Service string `json:"service"`
	Server  string `json:"server"`
	Weight  int    `json:"weight"` // 0: drained
}

type overrideKey struct{ service, server string }

// overrides is the persisted set; path "" keeps nothing (tests, embedders).
type overrides struct {
	mu   sync.Mutex
	path string
	m    map[overrideKey]int
}

// SetOverridesFile loads the run-time weights kept in path (none if it
// does not exist) and keeps later changes there. Call it before the
// first Apply.
func (d *Director) SetOverridesFile(path string) error {
	o := &d.ovr
	o.mu.Lock()
	defer o.mu.Unlock()
	o.path, o.m = path, map[overrideKey]int{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("run-time weights: %w", err)
	}
	var list []overrideEntry
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("run-time weights %s: %v (remove the file to forget them)", path, err)
	}
	for _, e := range list {
		if e.Weight < 0 || e.Weight > 65535 {
			return fmt.Errorf("run-time weights %s: %s %s: weight %d out of 0..65535", path, e.Service, e.Server, e.Weight)
		}
		o.m[overrideKey{e.Service, e.Server}] = e.Weight
	}
	if len(list) > 0 {
		d.log.Info("run-time weights kept from before the restart (corral ctl enable undoes one)", "file", path, "count", len(list))
	}
	return nil
}

// record keeps service/server's run-time weight (w < 0: none) and writes
// the file; the change is refused if it cannot be kept.
func (o *overrides) record(service, server string, w int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.path == "" {
		return nil
	}
	k := overrideKey{service, server}
	old, had := o.m[k]
	if w < 0 {
		delete(o.m, k)
	} else {
		o.m[k] = w
	}
	list := make([]overrideEntry, 0, len(o.m))
	for k, w := range o.m {
		list = append(list, overrideEntry{k.service, k.server, w})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Service != list[j].Service {
			return list[i].Service < list[j].Service
		}
		return list[i].Server < list[j].Server
	})
	b, _ := json.MarshalIndent(list, "", "  ")
	if err := safefile.WriteFile(o.path, append(b, '\n'), 0o600); err != nil {
		if had {
			o.m[k] = old
		} else {
			delete(o.m, k)
		}
		return fmt.Errorf("keeping the run-time weight in %s: %w", o.path, err)
	}
	return nil
}

// apply sets the kept run-time weights on the servers of m that have one.
func (o *overrides) apply(m map[string]*service) {
	o.mu.Lock()
	kept := make(map[overrideKey]int, len(o.m))
	for k, w := range o.m {
		kept[k] = w
	}
	o.mu.Unlock() // SetServer takes a service's lock, then this one
	for k, w := range kept {
		s := m[k.service]
		if s == nil {
			continue
		}
		s.mu.Lock()
		for _, r := range s.reals {
			if r.addr == k.server {
				r.override.Store(int64(w))
			}
		}
		s.mu.Unlock()
	}
}
