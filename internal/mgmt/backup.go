package mgmt

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The backup file (secret: it holds the CA key and the bootstrap token):
//
//	corral-mgmt-backup v1\n
//	section NAME LENGTH\n  LENGTH bytes  \n      (repeated)
//	end sha256 HEX\n                             (sha256 of everything before "end")
//
// Sections: "kv" (every /corral/ key and value, JSON: the configuration
// history, audit log, users, tokens, members, CA), "snapshot" (etcd's own
// snapshot, for etcdutl if ever needed), "file tls/ca.pem", "file
// tls/ca.key", "file admin.token". Restore puts the kv section back; the
// snapshot is carried, not used.

const (
	backupHeader  = "corral-mgmt-backup v1\n"
	restorePend   = "restore.pending"
	maxBackupSize = 4 << 30
)

// maxSnapshot is the largest etcd snapshot a backup carries (tests lower it).
var maxSnapshot int64 = maxBackupSize - 1<<20

// backupFiles are the data directory's files a backup carries.
var backupFiles = []string{"tls/ca.pem", "tls/ca.key", "admin.token"}

type kvPair struct {
	K string `json:"k"`
	V []byte `json:"v"`
}

// Backup writes the station's backup file to w.
func (s *Station) Backup(ctx context.Context, w io.Writer) error {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("backup: read keys: %w", err)
	}
	kvs := make([]kvPair, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		kvs = append(kvs, kvPair{K: string(kv.Key), V: kv.Value})
	}
	kvJSON, err := json.Marshal(kvs)
	if err != nil {
		return err
	}
	// The snapshot (as big as etcd's database) goes through a temporary
	// file, not memory; one too big for a backup is an error, not cut.
	rc, err := s.cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("backup: etcd snapshot: %w", err)
	}
	snap, err := os.CreateTemp(s.opt.Data, ".backup-snapshot-*")
	if err != nil {
		rc.Close()
		return fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(snap.Name())
	defer snap.Close()
	snapLen, err := io.Copy(snap, io.LimitReader(rc, maxSnapshot+1))
	rc.Close()
	if err != nil {
		return fmt.Errorf("backup: etcd snapshot: %w", err)
	}
	if snapLen > maxSnapshot {
		return fmt.Errorf("backup: etcd snapshot over %d bytes", maxSnapshot)
	}
	if _, err := snap.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	h := sha256.New()
	bw := bufio.NewWriter(w)
	mw := io.MultiWriter(bw, h)
	io.WriteString(mw, backupHeader)
	section := func(name string, b []byte) {
		fmt.Fprintf(mw, "section %s %d\n", name, len(b))
		mw.Write(b)
		io.WriteString(mw, "\n")
	}
	section("kv", kvJSON)
	fmt.Fprintf(mw, "section snapshot %d\n", snapLen)
	if n, err := io.Copy(mw, snap); err != nil || n != snapLen {
		return fmt.Errorf("backup: etcd snapshot: %d of %d bytes copied: %v", n, snapLen, err)
	}
	io.WriteString(mw, "\n")
	for _, f := range backupFiles {
		b, err := os.ReadFile(filepath.Join(s.opt.Data, f))
		if err == nil {
			section("file:"+f, b)
		}
	}
	fmt.Fprintf(bw, "end sha256 %s\n", hex.EncodeToString(h.Sum(nil)))
	return bw.Flush()
}

// backupContent is a checked backup file's sections.
type backupContent struct {
	kv       []kvPair
	snapshot []byte
	files    map[string][]byte
}

// parseBackup checks a whole backup file (header, sections, trailer's
// sha256) and returns its content.
func parseBackup(b []byte) (*backupContent, error) {
	if !bytes.HasPrefix(b, []byte(backupHeader)) {
		return nil, errors.New("not a corral station backup (no \"corral-mgmt-backup v1\" header)")
	}
	c := &backupContent{files: map[string][]byte{}}
	off := len(backupHeader)
	for i := 0; ; i++ {
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			return nil, fmt.Errorf("cut at byte %d: no end line (the file is incomplete)", off)
		}
		line := string(b[off : off+nl])
		if rest, ok := strings.CutPrefix(line, "end sha256 "); ok {
			sum := sha256.Sum256(b[:off])
			if rest != hex.EncodeToString(sum[:]) {
				return nil, errors.New("checksum mismatch: the file is corrupt")
			}
			if off+nl+1 != len(b) {
				return nil, fmt.Errorf("%d bytes after the end line", len(b)-off-nl-1)
			}
			break
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "section" {
			return nil, fmt.Errorf("byte %d: want a section line, have %.40q", off, line)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || n > len(b)-off-nl-1-1 {
			return nil, fmt.Errorf("byte %d: section %s: length %q beyond the file (cut?)", off, f[1], f[2])
		}
		start := off + nl + 1
		data := b[start : start+n]
		if b[start+n] != '\n' {
			return nil, fmt.Errorf("byte %d: section %s not followed by a newline", start+n, f[1])
		}
		off = start + n + 1
		switch name := f[1]; {
		case name == "kv":
			if err := json.Unmarshal(data, &c.kv); err != nil {
				return nil, fmt.Errorf("section kv: %w", err)
			}
		case name == "snapshot":
			c.snapshot = data
		case strings.HasPrefix(name, "file:"):
			fn := strings.TrimPrefix(name, "file:")
			ok := false
			for _, want := range backupFiles {
				ok = ok || fn == want
			}
			if !ok {
				return nil, fmt.Errorf("section %s: not a file a backup carries", name)
			}
			c.files[fn] = data
		default:
			return nil, fmt.Errorf("unknown section %q", name)
		}
	}
	if c.kv == nil {
		return nil, errors.New("no kv section")
	}
	for _, kv := range c.kv {
		if !strings.HasPrefix(kv.K, prefix) {
			return nil, fmt.Errorf("key %q outside %s", kv.K, prefix)
		}
	}
	return c, nil
}

// Restore makes dataDir a fresh station data directory from a backup
// file: the CA and the bootstrap token are put back at once, the keys
// when a station first starts on dataDir (into its fresh etcd). It
// refuses a non-empty dataDir and a cut or corrupt file, and leaves
// nothing behind when it fails.
func Restore(file, dataDir string) error {
	if ents, err := os.ReadDir(dataDir); err == nil && len(ents) > 0 {
		return fmt.Errorf("restore: %s is not empty (restore into a fresh directory)", dataDir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("restore: %w", err)
	}
	st, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if st.Size() > maxBackupSize {
		return fmt.Errorf("restore: %s: %d bytes is more than a backup holds", file, st.Size())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	c, err := parseBackup(b)
	if err != nil {
		return fmt.Errorf("restore: %s: %w", file, err)
	}
	parent := filepath.Dir(filepath.Clean(dataDir))
	if err := safefile.MkdirAll(parent); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".corral-restore-")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	os.Chmod(tmp, 0o700)
	for name, data := range c.files {
		if err := writeFile0600(filepath.Join(tmp, name), data); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	kvJSON, _ := json.Marshal(c.kv)
	if err := writeFile0600(filepath.Join(tmp, restorePend), kvJSON); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	os.Remove(dataDir) // an empty one
	if err := os.Rename(tmp, dataDir); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	ok = true
	// The rename is the restore: make it survive a power cut.
	if err := safefile.SyncDir(parent); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// finishRestore puts a restored backup's keys into this station's etcd
// (which must hold nothing under /corral/ yet) and removes the pending
// file.
func (s *Station) finishRestore(ctx context.Context) error {
	path := filepath.Join(s.opt.Data, restorePend)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mgmt: restore: %w", err)
	}
	var kvs []kvPair
	if err := json.Unmarshal(b, &kvs); err != nil {
		return fmt.Errorf("mgmt: restore: %s: %w", path, err)
	}
	// etcd must hold nothing but (after a crash half-way through an
	// earlier attempt) keys of this very backup.
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("mgmt: restore: %w", err)
	}
	want := make(map[string][]byte, len(kvs))
	for _, kv := range kvs {
		want[kv.K] = kv.V
	}
	for _, kv := range resp.Kvs {
		if v, ok := want[string(kv.Key)]; !ok || !bytes.Equal(v, kv.Value) {
			return fmt.Errorf("mgmt: restore pending (%s) but etcd already holds other keys under %s (%s): restore needs a fresh etcd", path, prefix, kv.Key)
		}
	}
	// Transactions of at most 100 puts and half etcd's request limit (a
	// version may be 16 MiB).
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := s.cli.Txn(ctx).Then(ops...).Commit()
		ops, size = ops[:0], 0
		return err
	}
	n := 0
	for _, kv := range kvs {
		if strings.HasPrefix(kv.K, keyStations) {
			continue // stations register themselves when they serve
		}
		if strings.HasPrefix(kv.K, keyHA) && kv.K != keyHAKey {
			continue // the directors' election: on leases, long gone
		}
		if strings.HasPrefix(kv.K, keyFBPoller+"/") {
			continue // the stations' feedback poller election: likewise
		}
		if len(ops) == 100 || (len(ops) > 0 && size+len(kv.K)+len(kv.V) > maxEtcdRequest/2) {
			if err := flush(); err != nil {
				return fmt.Errorf("mgmt: restore: %w", err)
			}
		}
		ops = append(ops, clientv3.OpPut(kv.K, string(kv.V)))
		size += len(kv.K) + len(kv.V)
		n++
	}
	if err := flush(); err != nil {
		return fmt.Errorf("mgmt: restore: %w", err)
	}
	if err := s.audit(ctx, api.AuditEntry{User: "station " + s.name, Action: "restore", Detail: fmt.Sprintf("%d keys from a backup", n)}); err != nil {
		return fmt.Errorf("mgmt: restore: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("mgmt: restore: %w", err)
	}
	s.log.Info("restored from a backup", "keys", n)
	return nil
}
