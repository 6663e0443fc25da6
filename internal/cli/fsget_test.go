package cli

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestFSGetKeepsOldOnFailure: `corral fs get` over an existing file
// replaces it whole, keeping its mode, and through a symbolic link the file
// it names; a get that fails (an I/O server gone) leaves the old bytes. It
// truncated the destination first, so a failed get left it empty.
func TestFSGetKeepsOldOnFailure(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	fs := func(args ...string) (int, string) {
		t.Helper()
		code, _, errs := corral(t, "", append([]string{"fs", "--meta", fsys.Meta.Addr, "--secret-file", fsys.SecretFile}, args...)...)
		return code, errs
	}
	dir := t.TempDir()
	data := make([]byte, 3<<20) // stripes on both servers
	rand.Read(data)
	src := filepath.Join(dir, "src")
	os.WriteFile(src, data, 0o600)
	if code, errs := fs("put", "--replicas", "1", src, "/big"); code != 0 { // one copy: a server down fails the read
		t.Fatalf("put: %s", errs)
	}
	old := []byte("the old content\n")
	local := filepath.Join(dir, "local")
	os.WriteFile(local, old, 0o640)
	os.Chmod(local, 0o640)
	link := filepath.Join(dir, "link")
	os.Symlink("local", link)

	if code, errs := fs("get", "/big", link); code != 0 {
		t.Fatalf("get: %s", errs)
	}
	if got, _ := os.ReadFile(local); !bytes.Equal(got, data) {
		t.Fatalf("get through a link: %d bytes in %s, want %d", len(got), local, len(data))
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if fi, _ := os.Stat(local); fi.Mode().Perm() != 0o640 {
		t.Errorf("replaced file: mode %04o, want its old 0640", fi.Mode().Perm())
	}

	os.WriteFile(local, old, 0o640)
	fsys.IODs[1].Kill()
	if code, _ := fs("get", "/big", local); code == 0 {
		t.Fatal("get with an I/O server down succeeded")
	}
	if got, _ := os.ReadFile(local); !bytes.Equal(got, old) {
		t.Fatalf("after a failed get %s holds %d bytes, want the old %d", local, len(got), len(old))
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("left in %s: %v, want src, local and link only", dir, names)
	}
}
