package director

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

// ReloadStatus is the outcome of the last attempt to load the
// configuration file: what `corral ctl status` shows beside the log.
type ReloadStatus struct {
	Time  time.Time `json:"time"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"` // every error, one per line: file:line: field: why
	File  string    `json:"file"`
	Stamp string    `json:"stamp"` // the file's modification time and size when read
}

// ReloadStatus is the last load's outcome; nil before the first.
func (d *Director) ReloadStatus() *ReloadStatus { return d.reload.Load() }

// reloadFrom loads path and applies it; a configuration that does not
// parse, validate or start leaves the running one as it was. The outcome
// is logged and kept for ReloadStatus.
func (d *Director) reloadFrom(path, stamp string) error {
	next, err := config.Load(path)
	if err == nil && d.cfg.Load().Admin != "" && next.Admin != d.cfg.Load().Admin {
		err = &config.Error{File: path, Line: next.AdminLine, Field: "admin", Msg: "changes need a restart"}
	}
	if err == nil {
		err = d.Apply(next)
	}
	st := &ReloadStatus{Time: time.Now(), OK: err == nil, File: path, Stamp: stamp}
	if err != nil {
		st.Error = err.Error()
		// One log line per error: each names its place.
		var all config.Errors
		if errors.As(err, &all) {
			for _, e := range all {
				d.log.Error("configuration rejected; the running one stays", "file", path, "err", e)
			}
		} else {
			d.log.Error("configuration rejected; the running one stays", "file", path, "err", err)
		}
	} else {
		d.log.Info("configuration loaded", "file", path, "services", len(next.Services))
	}
	d.reload.Store(st)
	return err
}

// Check validates a configuration file without running anything: the
// language and the fields against each other. It returns every error found.
// (An admin address off loopback is allowed: every call there needs the
// token.)
func Check(path string) error {
	_, err := config.Load(path)
	return err
}

func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), fi.Size())
}

// RunOption is a setting of Run beyond the configuration file.
type RunOption func(*runOptions)

type runOptions struct {
	sizes     func(meta string) SizeSource
	tokenFile string
	insecure  bool
}

// WithInsecureSync makes the HA sync streams plain text (see
// ha.Config.Insecure).
func WithInsecureSync() RunOption {
	return func(o *runOptions) { o.insecure = true }
}

// WithSizeSource gives the director a way to learn file sizes (mwlc).
func WithSizeSource(open func(meta string) SizeSource) RunOption {
	return func(o *runOptions) { o.sizes = open }
}

// WithTokenFile keeps the admin API's bearer token in path (created, mode
// 0600, if missing) instead of DefaultTokenFile(the configuration file).
func WithTokenFile(path string) RunOption {
	return func(o *runOptions) { o.tokenFile = path }
}
