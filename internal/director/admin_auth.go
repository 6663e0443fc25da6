package director

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/corral-cluster/corral/internal/safefile"
)

// TokenFileName is the admin token's file, by default beside the
// director's configuration file.
const TokenFileName = "admin.token"

// DefaultTokenFile is where the director keeps the admin token when
// --token-file is not given: beside its configuration file.
func DefaultTokenFile(configPath string) string {
	return filepath.Join(filepath.Dir(configPath), TokenFileName)
}

// EnsureToken returns the admin token in path, creating the file (mode
// 0600, 32 random bytes in hex) when it does not exist. An existing file is
// reused as is, so `corral ctl` keeps working across restarts.
func EnsureToken(path string) (string, error) {
	tok, err := LoadToken(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok = hex.EncodeToString(b[:])
	// O_EXCL: two directors starting at once must not each write their own.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadToken(path)
	}
	if err != nil {
		return "", fmt.Errorf("admin token: %w (choose another place with --token-file)", err)
	}
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = safefile.SyncDir(filepath.Dir(path)) // the new name, past a power cut
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("admin token: %s: %w", path, err)
	}
	return tok, nil
}

// LoadToken reads an admin token file. A file others can read is refused,
// as ssh refuses a private key others can read: anyone who reads it can
// drain the cluster.
func LoadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("admin token: %s is a directory", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("admin token: %s has mode %#o; others can read it: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b := make([]byte, 1024)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("admin token: %s: want one word of at least 16 characters (delete the file and the director writes a new one)", path)
	}
	return tok, nil
}

// guard is the admin API's front door (issue 12 §4):
//
//   - Host must be an IP literal or localhost, on every request: a browser
//     tricked by DNS rebinding sends the attacker's name and gets 421.
//   - Mutating requests from another origin (a page in a browser) get 403.
//   - Mutating requests need "Authorization: Bearer TOKEN": else 401.
//   - On a non-loopback listener reads need the token too, and on any
//     listener /debug/ (the Go profiles: they show the process's memory,
//     and a CPU profile costs the director while it runs).
type guard struct {
	token     string
	openReads bool // reads without the token (loopback listener)
	next      http.Handler
	xorigin   *http.CrossOriginProtection
}

// Guard wraps the admin API h with the checks above. openReads lets
// GET/HEAD through without the token; give it only on loopback.
func Guard(token string, openReads bool, h http.Handler) http.Handler {
	return &guard{token: token, openReads: openReads, next: h, xorigin: http.NewCrossOriginProtection()}
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !localHost(r.Host) {
		http.Error(w, fmt.Sprintf("421: Host %q refused: the admin API answers to an IP address or localhost only", r.Host), http.StatusMisdirectedRequest)
		return
	}
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	if !read {
		if err := g.xorigin.Check(r); err != nil {
			http.Error(w, "403: cross-origin request refused (the admin API is not for web pages)", http.StatusForbidden)
			return
		}
	}
	open := read && g.openReads && !debugPath(r.URL.Path)
	if !open && !g.authorized(r) && r.URL.Path != "/healthz" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="corral director"`)
		http.Error(w, "401: missing or wrong admin token (Authorization: Bearer TOKEN; corral ctl: pass --token-file)", http.StatusUnauthorized)
		return
	}
	g.next.ServeHTTP(w, r)
}

// debugPath reports whether p is under /debug/, as the mux will see it
// once cleaned.
func debugPath(p string) bool {
	p = path.Clean("/" + p)
	return p == "/debug" || strings.HasPrefix(p, "/debug/")
}

func (g *guard) authorized(r *http.Request) bool {
	// The scheme is case-insensitive (RFC 9110 11.1); the token is not.
	scheme, got, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || g.token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(g.token)) == 1
}

// localHost reports whether a Host header names the admin API without a
// DNS name an attacker could point at us: an IP literal or localhost.
func localHost(host string) bool {
	if host == "" {
		return false
	}
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return strings.EqualFold(h, "localhost")
}
