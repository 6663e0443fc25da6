package mgmt

// Webmasters' uploads (docs/mgmt.md "Webmasters' uploads"): PUT and
// DELETE RouteFiles+DOMAIN/PATH write into the domain's directory in the
// file system, through the station's own client (the cluster secret):
// webmasters never hold a file-system credential.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

const (
	maxUpload     = 1 << 30 // one PUT's body
	maxUploadPath = 4096
	uploadTimeout = 30 * time.Minute // one upload, file system calls included
)

// errUnknownDomain: the domain is not in the current configuration (404).
var errUnknownDomain = errors.New("unknown domain")

// uploader serves RouteFiles; its dependencies are functions so a test
// can give it a real file system without a whole station.
type uploader struct {
	// docroot is the domain's directory (errUnknownDomain if none).
	docroot func(ctx context.Context, domain string) (string, error)
	// fs is a file-system client with the full credential.
	fs    func(ctx context.Context) (*client.Client, error)
	audit func(ctx context.Context, e api.AuditEntry) error
	event func(e api.Event)
}

// uploadClients caches each station's file-system client (one per meta
// list; the Station struct belongs to the station core).
var uploadClients sync.Map // *Station -> *uploadClient

type uploadClient struct {
	mu   sync.Mutex
	meta string
	c    *client.Client
}

// routesUpload registers RouteFiles (webmasters' uploads).
func (s *Station) routesUpload(mux *http.ServeMux) {
	u := &uploader{docroot: s.domainDocroot, fs: s.uploadFS, audit: s.audit, event: s.event}
	mux.HandleFunc("PUT "+api.RouteFiles+"{domain}/{path...}", s.auth(permWeb, u.put))
	mux.HandleFunc("DELETE "+api.RouteFiles+"{domain}/{path...}", s.auth(permWeb, u.del))
}

// domainDocroot is a domain's docroot in the current configuration: its
// Docroot, or filesystem.docroot (default /www) + "/" + its name.
func (s *Station) domainDocroot(ctx context.Context, domain string) (string, error) {
	cfg, err := s.currentConfig(ctx)
	if err != nil {
		return "", err
	}
	return docrootOf(cfg, domain)
}

func docrootOf(cfg *clustercfg.Config, domain string) (string, error) {
	for _, d := range cfg.Domains {
		if d.Name != domain {
			continue
		}
		if d.Docroot != "" {
			return path.Clean("/" + d.Docroot), nil
		}
		root := cfg.FileSystem.Docroot
		if root == "" {
			root = "/www"
		}
		return path.Join("/", root, d.Name), nil
	}
	return "", errUnknownDomain
}

// currentConfig parses the current configuration version.
func (s *Station) currentConfig(ctx context.Context) (*clustercfg.Config, error) {
	v, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	if v.YAML == "" {
		return &clustercfg.Config{}, nil // nothing applied yet: no domains
	}
	return clustercfg.Parse(fmt.Sprintf("version %d", v.Version), []byte(v.YAML))
}

// uploadFS is the station's file-system client (full credential from
// Options.Secret, meta from Options.Meta or the configuration).
func (s *Station) uploadFS(ctx context.Context) (*client.Client, error) {
	if len(s.opt.Secret) == 0 {
		return nil, errors.New("uploads are off: the station has no file-system secret (--secret-file)")
	}
	cred, err := proto.ParseCredential(s.opt.Secret)
	if err != nil {
		return nil, fmt.Errorf("the station's file-system secret: %w", err)
	}
	meta := s.opt.Meta
	if len(meta) == 0 {
		cfg, err := s.currentConfig(ctx)
		if err != nil {
			return nil, err
		}
		meta = cfg.FileSystem.Meta
	}
	if len(meta) == 0 {
		return nil, errors.New("uploads are off: no metadata members (filesystem.meta in the configuration, or --meta)")
	}
	v, _ := uploadClients.LoadOrStore(s, &uploadClient{})
	uc := v.(*uploadClient)
	uc.mu.Lock()
	defer uc.mu.Unlock()
	list := strings.Join(meta, ",")
	if uc.c == nil || uc.meta != list {
		if uc.c != nil {
			uc.c.Close()
		}
		uc.c, uc.meta = client.New(list, client.WithSecurity(proto.Security{Cred: cred})), list
	}
	return uc.c, nil
}

// cleanUpload checks a path inside a domain: relative, no "..", no NUL;
// it returns it clean ("a/b/c") or an error naming it.
func cleanUpload(p string) (string, error) {
	if len(p) > maxUploadPath {
		return "", fmt.Errorf("path is longer than %d bytes", maxUploadPath)
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("path contains a NUL byte")
	}
	var parts []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("path %q goes up with \"..\"; give it from the domain's directory down", p)
		}
		parts = append(parts, seg)
	}
	if len(parts) == 0 {
		return "", errors.New("no file path after the domain")
	}
	return strings.Join(parts, "/"), nil
}

// allowed says whether p may write into domain: admins anywhere, a
// webmaster in their own domains.
func uploadAllowed(p *Principal, domain string) bool {
	if p == nil || p.Member {
		return false
	}
	switch p.Role {
	case api.RoleAdmin:
		return true
	case api.RoleWebmaster:
		return slices.Contains(p.Domains, domain)
	}
	return false
}

// target checks who and where, and resolves the file's path in the file
// system with its directory beneath the docroot; it writes the error
// answer itself and returns ok false.
func (u *uploader) target(ctx context.Context, w http.ResponseWriter, r *http.Request, p *Principal, mkdir bool) (c *client.Client, full, domain, rel string, ok bool) {
	domain = r.PathValue("domain")
	if !uploadAllowed(p, domain) {
		who := "nobody"
		if p != nil {
			who = p.Name
		}
		roError(w, http.StatusForbidden, "%s may not write to domain %q", who, domain)
		return
	}
	rel, err := cleanUpload(r.PathValue("path"))
	if err != nil {
		roError(w, http.StatusBadRequest, "%s: %v", domain, err)
		return
	}
	root, err := u.docroot(ctx, domain)
	if errors.Is(err, errUnknownDomain) {
		roError(w, http.StatusNotFound, "domain %q is not in the configuration", domain)
		return
	}
	if err != nil {
		roError(w, http.StatusInternalServerError, "configuration: %v", err)
		return
	}
	c, err = u.fs(ctx)
	if err != nil {
		roError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	dir := path.Dir(rel)
	if mkdir {
		if err := c.MkdirAll(ctx, root, 0o755); err != nil {
			fsError(w, domain, "/", err)
			return
		}
		// Every existing directory on the way must resolve beneath
		// the docroot before anything is made through it.
		parts := strings.Split(dir, "/")
		for i := range parts {
			if dir == "." {
				break
			}
			sub := strings.Join(parts[:i+1], "/")
			a, err := c.StatBeneath(ctx, root, sub)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err != nil {
				fsError(w, domain, sub, err)
				return
			}
			if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				roError(w, http.StatusConflict, "%s/%s: not a directory", domain, sub)
				return
			}
		}
		if dir != "." {
			if err := c.MkdirAll(ctx, path.Join(root, dir), 0o755); err != nil {
				fsError(w, domain, dir, err)
				return
			}
		}
	}
	if dir != "." {
		a, err := c.StatBeneath(ctx, root, dir)
		if err != nil {
			fsError(w, domain, dir, err)
			return
		}
		if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			roError(w, http.StatusConflict, "%s/%s: not a directory", domain, dir)
			return
		}
	}
	return c, path.Join(root, rel), domain, rel, true
}

// fsError answers a file-system error with the status it means.
func fsError(w http.ResponseWriter, domain, rel string, err error) {
	status := http.StatusBadGateway
	switch {
	case errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.ELOOP):
		roError(w, http.StatusForbidden, "%s/%s: a symbolic link leads outside the domain's directory", domain, rel)
		return
	case errors.Is(err, fs.ErrNotExist):
		status = http.StatusNotFound
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTEMPTY):
		status = http.StatusConflict
	case errors.Is(err, fs.ErrPermission):
		status = http.StatusForbidden
	}
	roError(w, status, "%s/%s: %v", domain, rel, err)
}

// countReader counts what went through.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// put writes the body as DOMAIN/PATH: under a temporary name, renamed
// into place, so readers see the old file or the whole new one.
func (u *uploader) put(w http.ResponseWriter, r *http.Request, p *Principal) {
	ctx, cancel := context.WithTimeout(r.Context(), uploadTimeout)
	defer cancel()
	c, full, domain, rel, ok := u.target(ctx, w, r, p, true)
	if !ok {
		return
	}
	if a, err := c.Lstat(ctx, full); err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		roError(w, http.StatusConflict, "%s/%s is a directory", domain, rel)
		return
	}
	body := &countReader{r: http.MaxBytesReader(w, r.Body, maxUpload)}
	if err := c.WriteFile(ctx, full, body, 0o644, client.CreateOpts{}, nil); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			roError(w, http.StatusRequestEntityTooLarge, "%s/%s: larger than %d bytes", domain, rel, int64(maxUpload))
			return
		}
		fsError(w, domain, rel, err)
		return
	}
	detail := fmt.Sprintf("%s/%s (%d bytes)", domain, rel, body.n)
	u.audit(ctx, api.AuditEntry{Time: time.Now(), User: p.Name, Action: "upload", Detail: detail})
	u.event(api.Event{Time: time.Now(), Kind: "upload", Msg: p.Name + " uploaded " + detail})
	roJSON(w, http.StatusOK, api.FileReply{Domain: domain, Path: rel, Size: body.n})
}

// del removes DOMAIN/PATH (a file, a link, or a directory with what is
// in it).
func (u *uploader) del(w http.ResponseWriter, r *http.Request, p *Principal) {
	ctx, cancel := context.WithTimeout(r.Context(), uploadTimeout)
	defer cancel()
	c, full, domain, rel, ok := u.target(ctx, w, r, p, false)
	if !ok {
		return
	}
	if err := c.RemoveAll(ctx, full); err != nil {
		fsError(w, domain, rel, err)
		return
	}
	detail := domain + "/" + rel
	u.audit(ctx, api.AuditEntry{Time: time.Now(), User: p.Name, Action: "delete", Detail: detail})
	u.event(api.Event{Time: time.Now(), Kind: "upload", Msg: p.Name + " deleted " + detail})
	roJSON(w, http.StatusOK, api.FileReply{Domain: domain, Path: rel})
}
