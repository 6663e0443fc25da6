// Package pfstest starts a real file system (the corral binary's meta and
// iod roles as processes on loopback) for tests and benchmarks.
package pfstest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds the corral command once per test process and returns its
// path.
func Binary(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "corral-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "corral")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/corral")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{err, string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("build corral: %v", buildErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// Start runs a metadata server and n I/O servers on free loopback ports,
// stopped when the test ends (their logs are printed if it failed).
func Start(t testing.TB, n int) *launch.FS {
	t.Helper()
	bin := Binary(t)
	data := t.TempDir()
	listens := make([]string, n)
	for i := range listens {
		listens[i] = "127.0.0.1:0"
	}
	fsys, err := launch.StartFS(context.Background(), bin, data, "127.0.0.1:0", listens)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fsys.Stop()
		if t.Failed() {
			for _, p := range append([]*launch.Proc{fsys.Meta}, fsys.IODs...) {
				t.Logf("%s log: %s", p.Name, launch.Tail(p.Log, 20))
			}
		}
	})
	return fsys
}

// SecretMain runs a package's tests (call it from TestMain) with one
// cluster secret that outlives every test: $CORRAL_SECRET_FILE names it,
// so the clusters they start adopt it (launch) rather than pointing the
// environment at a cluster's own file, which goes with its test and would
// break the commands later tests run. It returns the file to use before
// the tests run, then exits with their status.
func SecretMain(m *testing.M, setup func(secretFile string)) {
	dir, err := os.MkdirTemp("", "corral-test-secret-")
	if err != nil {
		panic(err)
	}
	f := filepath.Join(dir, proto.SecretFileName)
	if _, err := proto.EnsureSecretFile(f); err != nil {
		panic(err)
	}
	os.Setenv(proto.SecretEnv, f)
	if setup != nil {
		setup(f)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
