// Package safefile writes files so that a crash or a power cut leaves the
// old content or the new one, never a torn or empty file, and reads
// secrets only when no one but their owner can.
//
// A write goes to a temporary file beside the destination (mode 0600 until
// it is complete), is synced, renamed over the destination, and the
// directory is synced so the rename itself survives a power cut.
// Directories it creates are 0700.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// DirMode is the mode of the directories this package creates.
const DirMode = 0o700

// steps are the file-system calls a write is made of; tests replace them
// to fail, or stop as a crash would, at each one.
type steps struct {
	syncFile func(f *os.File) error
	rename   func(oldpath, newpath string) error
	syncDir  func(dir string) error
}

var sys = steps{
	syncFile: (*os.File).Sync,
	rename:   os.Rename,
	syncDir:  syncDir,
}

// SyncDir syncs directory dir, so the names created, renamed or removed in
// it survive a power cut (after renaming a directory into place, say).
func SyncDir(dir string) error { return sys.syncDir(dir) }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// MkdirAll makes dir and any missing parents with mode 0700, syncing the
// parent of each one it creates so the new names survive a power cut.
func MkdirAll(dir string) error { return MkdirAllMode(dir, DirMode) }

// MkdirAllMode is MkdirAll with the mode of the directories it makes.
func MkdirAllMode(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: errors.New("not a directory")}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAllMode(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		// Made meanwhile by someone else, whose sync of the parent may not
		// have happened yet: sync it here too.
		if fi, serr := os.Stat(dir); !errors.Is(err, fs.ErrExist) || serr != nil || !fi.IsDir() {
			return err
		}
	}
	if err := sys.syncDir(parent); err != nil {
		return fmt.Errorf("sync directory %s: %w", parent, err)
	}
	return nil
}

// WriteFile writes b to path with mode perm, atomically and durably,
// making path's directory (0700) if it is missing.
func WriteFile(path string, b []byte, perm fs.FileMode) error {
	if err := MkdirAll(filepath.Dir(path)); err != nil {
		return err
	}
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Commit()
}

// WriteSecret writes a secret: WriteFile with mode 0600.
func WriteSecret(path string, b []byte) error {
	return WriteFile(path, b, 0o600)
}

// File is a write in progress: bytes go to a temporary file beside the
// destination, which Commit puts in place and Abort throws away. The
// destination is untouched until Commit.
type File struct {
	*os.File
	path string
	perm fs.FileMode
	done bool
}

// Create starts an atomic write of path, whose directory must exist. The
// caller writes through the File and then calls Commit; a deferred Abort
// removes the temporary file on every other way out.
func Create(path string, perm fs.FileMode) (*File, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "write", Path: path, Err: errors.New("is a directory")}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*") // 0600
	if err != nil {
		return nil, err
	}
	return &File{File: f, path: path, perm: perm.Perm()}, nil
}

// Name is the destination's name (the temporary file's is f.File.Name()).
func (f *File) Name() string { return f.path }

// Commit syncs the bytes written, gives the file its mode, renames it over
// the destination and syncs the directory. After an error the destination
// holds its old content or, if the rename was done, the new one.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("write %s: already committed or aborted", f.path)
	}
	tmp := f.File.Name()
	err := f.File.Chmod(f.perm)
	if err == nil {
		err = sys.syncFile(f.File)
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = sys.rename(tmp, f.path)
	}
	f.done = true
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := sys.syncDir(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", f.path, err)
	}
	return nil
}

// Abort throws the write away, leaving the destination as it was; after
// Commit it does nothing, so it can be deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.File.Name())
}

// Copy writes what r yields to path atomically (see Create).
func Copy(path string, perm fs.FileMode, r io.Reader) (int64, error) {
	f, err := Create(path, perm)
	if err != nil {
		return 0, err
	}
	defer f.Abort()
	n, err := io.Copy(f, r)
	if err != nil {
		return n, err
	}
	return n, f.Commit()
}

// ErrExposed is wrapped by the errors of ReadSecret and CheckSecret for a
// secret others may read.
var ErrExposed = errors.New("readable by others")

// CheckSecret says, as ssh does for private keys, whether the file at path
// may hold a secret: a regular file (after symbolic links) that neither
// its group nor others may read or write. The error names the file and the
// chmod that fixes it.
func CheckSecret(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return checkMode(path, fi)
}

func checkMode(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if p := fi.Mode().Perm(); p&0o077 != 0 {
		return fmt.Errorf("%s: mode %04o is %w; a secret must be private to its owner: run chmod 600 %s", path, p, ErrExposed, path)
	}
	return nil
}

// ReadSecret reads the file at path after checking, on the open file, that
// no one but its owner may read it (see CheckSecret).
func ReadSecret(path string) ([]byte, error) {
	if err := CheckSecret(path); err != nil { // before opening: a FIFO would block
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkMode(path, fi); err != nil {
		return nil, err
	}
	// A credential or key is small: a larger file is not one.
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	if err == nil && len(b) > maxSecret {
		err = fmt.Errorf("%s: larger than 1 MiB, not a secret", path)
	}
	return b, err
}

const maxSecret = 1 << 20
