package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/corral-cluster/corral/internal/clientcfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
	"github.com/spf13/pflag"
)

// Where the station's client flags look when none is given: what `corral
// mgmt` (and `corral up`) write under ./corral-data/mgmt.
const (
	defaultStation   = "https://127.0.0.1:7600"
	defaultMgmtData  = "corral-data/mgmt"
	envStation       = "CORRAL_STATION"
	envMgmtTokenFile = "CORRAL_MGMT_TOKEN_FILE"
	envStationCA     = "CORRAL_STATION_CA"
	mgmtCallTimeout  = 30 * time.Second
	exitConflict     = 3 // a stale base version (409)
)

// netDialer bounds the dial that finds the station CA.
var netDialer = net.Dialer{Timeout: 10 * time.Second}

// stationFlags are the client flags of every command that calls the
// station: cfg, the mgmt subcommands, ctl status.
type stationFlags struct {
	station, tokenFile, ca string
	tokenFlag              string // the token file flag's name, for messages
}

// add registers --station, --token-file and --ca under the given names
// (ctl status has a --token-file of its own: the director's).
func (f *stationFlags) add(fs *pflag.FlagSet) { f.addNamed(fs, "station", "token-file", "ca") }

func (f *stationFlags) addNamed(fs *pflag.FlagSet, station, tokenFile, ca string) {
	fs.StringVar(&f.station, station, clientcfg.Station.Value(), "station API URL; several, comma-separated, are tried in order (env "+envStation+"; else the client configuration's station)")
	fs.StringVar(&f.tokenFile, tokenFile, os.Getenv(envMgmtTokenFile), "API token file (env "+envMgmtTokenFile+"; default ./"+defaultMgmtData+"/admin.token if it exists, else the client configuration's station-token-file, which corral up and 'corral mgmt login' write)")
	fs.StringVar(&f.ca, ca, os.Getenv(envStationCA), "station CA certificate, PEM (env "+envStationCA+"; default ./"+defaultMgmtData+"/tls/ca.pem if it exists, else the client configuration's station-ca, else the system's CAs)")
	f.tokenFlag = tokenFile
}

// stations is the --station list.
func (f *stationFlags) stations() ([]string, error) {
	var out []string
	for _, s := range splitList(f.station) {
		if !strings.Contains(s, "://") {
			s = "https://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return nil, usageError{fmt.Errorf("--station %q: want a URL such as %s", s, defaultStation)}
		}
		out = append(out, strings.TrimSuffix(s, "/"))
	}
	if len(out) == 0 {
		return nil, usageError{fmt.Errorf("--station is empty: give the station's URL, such as %s", defaultStation)}
	}
	return out, nil
}

// loginTokenPath is where `corral mgmt login` keeps the API token:
// $XDG_CONFIG_HOME/corral/token (~/.config/corral/token).
func loginTokenPath() (string, error) {
	dir, err := clientcfg.Dir()
	if err != nil {
		return "", fmt.Errorf("%v: give --save FILE", err)
	}
	return filepath.Join(dir, clientcfg.LoginTokenName), nil
}

// tokenPath picks the token file: the flag, else clientcfg's places (the
// station's bootstrap admin token under ./corral-data/mgmt, the client
// configuration, the token 'corral mgmt login' saved); "" if none.
func (f *stationFlags) tokenPath() string {
	if f.tokenFile != "" {
		return f.tokenFile
	}
	return clientcfg.StationToken.Value()
}

// caPath picks the CA file: the flag, else ./corral-data/mgmt/tls/ca.pem,
// else the client configuration's.
func (f *stationFlags) caPath() string {
	if f.ca != "" {
		return f.ca
	}
	return clientcfg.StationCA.Value()
}

// client makes the station client; needToken says the call is refused
// without one (every call but login), so a missing token is said here.
func (f *stationFlags) client(needToken bool) (*api.Client, error) {
	st, err := f.stations()
	if err != nil {
		return nil, err
	}
	var tok string
	if p := f.tokenPath(); p != "" {
		b, err := safefile.ReadSecret(p) // refused when others may read it
		if err != nil {
			return nil, fileError("API token file", p, err)
		}
		tok = strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("API token %s is empty", p)
		}
	} else if needToken {
		st := clientcfg.StationToken
		if f.tokenFlag != "" {
			st.Flag = "--" + f.tokenFlag
		}
		return nil, st.Missing()
	}
	var ca []byte
	if p := f.caPath(); p != "" {
		if ca, err = os.ReadFile(p); err != nil {
			return nil, fileError("station CA file", p, err)
		}
		if blk, _ := pem.Decode(ca); blk == nil || blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("station CA file %s: no PEM certificate in it (give --ca the station's DATA/tls/ca.pem)", p)
		}
	}
	return api.NewClient(st, tok, ca)
}

// fileError names a file the user gave (or a default picked) and what it
// is for; the root's error printing would keep only the path of a
// *fs.PathError and drop the what.
func fileError(what, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %v", what, path, err)
}

// connectHint is what to do about a station that could not be reached
// for a reason the user can fix ("" if none).
func connectHint(msg string) string {
	switch {
	case strings.Contains(msg, "certificate signed by unknown authority"),
		strings.Contains(msg, "certificate is not trusted"):
		return " (give --ca, the station's DATA/tls/ca.pem)"
	case strings.Contains(msg, "HTTP request to an HTTPS server"):
		return " (the station speaks HTTPS: give --station https://...)"
	case strings.Contains(msg, "connection refused"):
		return " (is 'corral mgmt' running there? --station names it)"
	}
	return ""
}

// mgmtCtx is the context of one call: ends on a signal or after the
// call timeout.
func mgmtCtx() (context.Context, context.CancelFunc) {
	ctx, stop := signalContext()
	ctx, cancel := context.WithTimeout(ctx, mgmtCallTimeout)
	return ctx, func() { cancel(); stop() }
}

// stationError turns an answer of the station into what the user reads:
// configuration errors one per line as FILE:LINE: PATH: msg (exit 1), a
// stale base version as exit 3 with what to do. Other errors pass.
func stationError(cmdPath, file string, base int64, err error) error {
	var se *api.StatusError
	if !errors.As(err, &se) {
		if h := connectHint(err.Error()); h != "" {
			return fmt.Errorf("%w%s", err, h)
		}
		return err
	}
	switch {
	case se.Status == http.StatusConflict:
		fmt.Fprintf(os.Stderr, "%s: the configuration changed since version %d (now %d): corral cfg get, merge your change, apply again\n", cmdPath, base, se.Body.Current)
		return exitError{exitConflict}
	case len(se.Body.Errors) > 0:
		file = docName(file)
		fmt.Fprintf(os.Stderr, "%s: %s\n", cmdPath, se.Body.Error)
		for _, fe := range se.Body.Errors {
			fmt.Fprintln(os.Stderr, fieldErrorLine(file, fe))
		}
		return exitError{1}
	case se.Status == http.StatusUnauthorized:
		return fmt.Errorf("%s (the API token was refused: give --token-file, or 'corral mgmt login --user NAME')", se.Body.Error)
	case se.Status == http.StatusForbidden:
		return fmt.Errorf("refused: %s", se.Body.Error)
	}
	return fmt.Errorf("station: %s%s", strings.TrimSpace(se.Body.Error), connectHint(se.Body.Error))
}

// fieldErrorLine is one configuration error as compilers print them;
// with no file (the errors are not about lines of one the user wrote, as
// a transaction's) PATH: msg alone.
func fieldErrorLine(file string, fe api.FieldError) string {
	if file == "" {
		return fmt.Sprintf("%s: %s", fe.Path, fe.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", file, fe.Line, fe.Path, fe.Msg)
}

// printJSONTo writes v as indented JSON.
func printJSONTo(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// writeFileAtomic writes b to path with mode through safefile (a
// temporary file beside it, synced, renamed, the directory synced), so a
// reader never sees half a file and a crash leaves the old one or the new.
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory: give a file name", path)
	}
	f, err := safefile.Create(path, mode)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Commit()
}

// readPassword reads a password: the first line of file, else of
// standard input (without echo on a terminal, after a prompt).
func readPassword(file, prompt string) (string, error) {
	var r io.Reader = os.Stdin
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--password-file: %w", err)
		}
		defer f.Close()
		r = f
	} else if isTTYFile(os.Stdin) {
		fmt.Fprint(os.Stderr, prompt)
		if restore := noEcho(os.Stdin); restore != nil {
			defer func() { restore(); fmt.Fprintln(os.Stderr) }()
		}
	}
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		src := "standard input"
		if file != "" {
			src = file
		}
		return "", fmt.Errorf("no password on %s (its first line is the password)", src)
	}
	return pw, nil
}

// noEcho turns the terminal's echo off; it returns what turns it back on
// (nil if the terminal would not).
func noEcho(f *os.File) func() {
	var t syscall.Termios
	fd := f.Fd()
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t))); e != 0 {
		return nil
	}
	old := t
	t.Lflag &^= syscall.ECHO
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&t))); e != 0 {
		return nil
	}
	return func() { syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&old))) }
}

// caHash is the join token's CA pin: the first 32 hex digits of the
// SHA-256 of the CA certificate's DER.
func caHash(der []byte) string {
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:])[:32]
}

// stationCADER finds the station CA's certificate: the --ca file, else
// the root of the chain the system verified when dialling the station.
func stationCADER(f *stationFlags, station string) ([]byte, error) {
	if p := f.caPath(); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("station CA: %w", err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil || blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("station CA %s: no PEM certificate in it", p)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return nil, fmt.Errorf("station CA %s: %w", p, err)
		}
		return blk.Bytes, nil
	}
	u, err := url.Parse(station)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("no station CA to pin in the join token: give --ca (the station's DATA/tls/ca.pem)")
	}
	host := u.Host
	if u.Port() == "" {
		host += ":443"
	}
	conn, err := tls.DialWithDialer(&netDialer, "tcp", host, &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()})
	if err != nil {
		return nil, fmt.Errorf("station CA: %v (give --ca, the station's DATA/tls/ca.pem)", err)
	}
	defer conn.Close()
	chains := conn.ConnectionState().VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil, errors.New("station CA: no verified chain: give --ca")
	}
	c := chains[0]
	return c[len(c)-1].Raw, nil
}
