package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
)

// MemServe is the bare Go baseline of the web figures: net/http serving
// every file under root from memory (loaded once at start), as a Go static
// server does (http.ServeContent: Last-Modified, Range, conditional GETs),
// with nothing else: no file system, no QoS, no metrics, no logs. It
// prints the readiness line launch.Start waits for and serves until ctx
// ends.
func MemServe(ctx context.Context, root, listen string, out io.Writer) error {
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files["/"+filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return fmt.Errorf("memserve: loading %s: %w", root, err)
	}
	mtime := time.Now()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, r.URL.Path, mtime, bytes.NewReader(b))
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Fprintf(out, "corral memserve: %d files\ncorral memserve: listening on %s\n", len(files), ln.Addr())
	if err := srv.Serve(ln); err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "closed") {
		return err
	}
	return nil
}

// startMemServe runs `corral bench memserve` on root at a free loopback
// port: a process of its own, as the nodes and nginx are.
func startMemServe(ctx context.Context, bin, root, logPath string) (*launch.Proc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	return launch.Start(ctx, "memserve", bin, logPath, "bench", "memserve", "--root", root, "--listen", addr)
}
