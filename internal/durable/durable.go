// Package durable creates files and directories whose directory entries
// survive a power cut, not only their data.
//
// POSIX makes a file's data durable with fsync of the file, but its name
// only with fsync of the directory that holds the name: a file created,
// synced and acknowledged can vanish at a power cut together with a
// directory made for it, unless every new entry's parent is synced. (On
// ext4 the journal usually commits the entry within seconds, which hides
// the bug until another file system or a cut at the wrong moment.) These
// helpers sync the parent of every entry they make; etcd's fileutil and
// CockroachDB's vfs do the same.
package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/corral-cluster/corral/internal/safefile"
)

// SyncDir makes the entries of directory dir durable (safefile's).
func SyncDir(dir string) error { return safefile.SyncDir(dir) }

// MkdirAll is os.MkdirAll whose new directories survive a power cut
// (safefile's): each one's parent is synced after it is made.
func MkdirAll(path string, perm fs.FileMode) error { return safefile.MkdirAllMode(path, perm) }

// Create opens path for reading and writing, creating it with perm if it is
// missing (flag may add os.O_TRUNC or os.O_EXCL). When it made the file,
// the new entry is durable before Create returns; the data is the caller's
// to sync.
func Create(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|flag, perm)
	if err == nil {
		if serr := SyncDir(filepath.Dir(path)); serr != nil {
			f.Close()
			return nil, serr
		}
		return f, nil
	}
	if !errors.Is(err, fs.ErrExist) || flag&os.O_EXCL != 0 {
		return nil, err
	}
	return os.OpenFile(path, os.O_RDWR|flag, perm)
}
