// Package clientcfg is where every client command (fs, cfg, ctl, mount,
// mgmt ...) finds the cluster: the station's URL, CA and API token, the
// metadata members, the cluster secret, the director's admin API and its
// token. Each setting is looked up in one order, from the most specific
// to the least:
//
//  1. the command's flag;
//  2. its environment variable;
//  3. a file of a `corral up` run from the working directory
//     (./corral-data/...), when it exists;
//  4. the per-user client configuration, $XDG_CONFIG_HOME/corral/client.yaml
//     (~/.config/corral/client.yaml), which `corral up` and
//     `corral mgmt login` write;
//  5. the built-in default, where there is one (the loopback addresses
//     `corral up` uses).
//
// A setting found nowhere is said by Setting.Missing: every place looked
// in and what to run.
package clientcfg

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/corral-cluster/corral/internal/safefile"
	"go.yaml.in/yaml/v3"
)

// FileName is the client configuration's name in its directory.
const FileName = "client.yaml"

// Config is the client configuration. Paths are absolute, or relative to
// the file's directory.
type Config struct {
	// Station is the station's API URL (several, comma-separated).
	Station string `yaml:"station,omitempty"`
	// StationCA is the station's CA certificate (PEM).
	StationCA string `yaml:"station-ca,omitempty"`
	// StationTokenFile holds an API token of the station.
	StationTokenFile string `yaml:"station-token-file,omitempty"`
	// Meta is the metadata members, comma-separated.
	Meta string `yaml:"meta,omitempty"`
	// SecretFile is the cluster secret or a read-only credential.
	SecretFile string `yaml:"secret-file,omitempty"`
	// DirectorAdmin is the director's admin API address.
	DirectorAdmin string `yaml:"director-admin,omitempty"`
	// DirectorTokenFile is the director's admin token.
	DirectorTokenFile string `yaml:"director-token-file,omitempty"`
}

// Key names of Config's fields in the file, for Setting.Key.
const (
	KeyStation           = "station"
	KeyStationCA         = "station-ca"
	KeyStationTokenFile  = "station-token-file"
	KeyMeta              = "meta"
	KeySecretFile        = "secret-file"
	KeyDirectorAdmin     = "director-admin"
	KeyDirectorTokenFile = "director-token-file"
)

// get is the value of key ("" if unset), a path made absolute against
// dir.
func (c *Config) get(key, dir string) string {
	var v string
	path := true
	switch key {
	case KeyStation:
		v, path = c.Station, false
	case KeyStationCA:
		v = c.StationCA
	case KeyStationTokenFile:
		v = c.StationTokenFile
	case KeyMeta:
		v, path = c.Meta, false
	case KeySecretFile:
		v = c.SecretFile
	case KeyDirectorAdmin:
		v, path = c.DirectorAdmin, false
	case KeyDirectorTokenFile:
		v = c.DirectorTokenFile
	}
	if v != "" && path && !filepath.IsAbs(v) {
		v = filepath.Join(dir, v)
	}
	return v
}

// Dir is the per-user configuration directory: $XDG_CONFIG_HOME/corral,
// else ~/.config/corral.
func Dir() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no per-user configuration directory (%v): set XDG_CONFIG_HOME or HOME", err)
	}
	return filepath.Join(d, "corral"), nil
}

// Path is the client configuration file.
func Path() (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, FileName), nil
}

// Load reads the client configuration; a missing file is an empty one. A
// file others may write or read is refused: it says which credentials a
// command sends where.
func Load() (Config, string, error) {
	var c Config
	p, err := Path()
	if err != nil {
		return c, "", err
	}
	b, err := safefile.ReadSecret(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, p, nil
	}
	if err != nil {
		return c, p, err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		return Config{}, p, fmt.Errorf("%s: %v", p, err)
	}
	return c, p, nil
}

// Update changes the client configuration with change and writes it
// (mode 0600, its directory 0700, atomically); it returns the file.
func Update(change func(*Config)) (string, error) {
	c, p, err := Load()
	if err != nil && p == "" {
		return "", err
	}
	// An unreadable file is replaced: what is written now is complete for
	// the parts the writer knows, and the rest was unusable anyway.
	change(&c)
	b, err := yaml.Marshal(&c)
	if err != nil {
		return "", err
	}
	head := "# Where corral's client commands find the cluster (written by corral up\n# and corral mgmt login; flags and CORRAL_* variables take precedence).\n"
	if err := safefile.MkdirAll(filepath.Dir(p)); err != nil {
		return "", err
	}
	if err := safefile.WriteFile(p, append([]byte(head), b...), 0o600); err != nil {
		return "", err
	}
	invalidate()
	return p, nil
}

// The lookups of one command read the file once (a command builds every
// flag's default); keyed by its path, which a test may move.
var (
	loadMu   sync.Mutex
	loadDone bool
	loadC    Config
	loadP    string
	loadErr  error
)

func cached() (Config, string, error) {
	p, _ := Path()
	loadMu.Lock()
	defer loadMu.Unlock()
	if !loadDone || p != loadP {
		loadC, loadP, loadErr = Load()
		loadDone = true
		if loadErr != nil {
			// Said once: the settings it holds fall back to their
			// defaults, which may be another cluster's.
			fmt.Fprintf(os.Stderr, "corral: the client configuration is not used: %v\n", loadErr)
		}
	}
	return loadC, loadP, loadErr
}

func invalidate() {
	loadMu.Lock()
	loadDone = false
	loadMu.Unlock()
}

// Setting is one thing a client command needs, and where it is looked
// for.
type Setting struct {
	What  string   // what it is, for messages: "the cluster secret"
	Flag  string   // the flag: "--secret-file"
	Env   string   // the environment variable ("" none)
	Local []string // files of a `corral up` in the working directory, tried in order when they exist
	Key   string   // its key in the client configuration ("" none)
	// Default is the value when found nowhere ("" none).
	Default string
	// Later are files tried after the client configuration when they
	// exist (the token `corral mgmt login --save` kept before the client
	// configuration named it).
	Later func() []string
	// Hint is what to run when it is missing.
	Hint string
}

// Value is the setting without its flag: the environment variable, else
// a local file, else the client configuration, else Default. Commands use
// it as the flag's default, so a given flag wins.
func (s Setting) Value() string {
	v, _ := s.Lookup()
	return v
}

// Lookup is Value with where it came from.
func (s Setting) Lookup() (value, from string) {
	if s.Env != "" {
		if v := os.Getenv(s.Env); v != "" {
			return v, "$" + s.Env
		}
	}
	for _, l := range s.Local {
		if _, err := os.Stat(l); err == nil {
			return l, "./" + l
		}
	}
	if s.Key != "" {
		if c, p, err := cached(); err == nil {
			if v := c.get(s.Key, filepath.Dir(p)); v != "" {
				return v, p
			}
		}
	}
	if s.Later != nil {
		for _, l := range s.Later() {
			if _, err := os.Stat(l); err == nil {
				return l, l
			}
		}
	}
	return s.Default, ""
}

// Places lists where the setting was looked for, in order.
func (s Setting) Places() []string {
	var out []string
	if s.Flag != "" {
		out = append(out, s.Flag)
	}
	if s.Env != "" {
		out = append(out, "$"+s.Env)
	}
	for _, l := range s.Local {
		out = append(out, "./"+l)
	}
	if s.Key != "" {
		p, err := Path()
		switch {
		case err != nil:
			out = append(out, "the client configuration ("+err.Error()+")")
		default:
			note := ""
			if _, _, lerr := cached(); lerr != nil {
				note = ", unreadable: " + lerr.Error()
			}
			out = append(out, fmt.Sprintf("%s (%s%s)", p, s.Key, note))
		}
	}
	if s.Later != nil {
		out = append(out, s.Later()...)
	}
	return out
}

// Missing is the error for a setting found nowhere: what, every place
// looked in, and what to run.
func (s Setting) Missing() error {
	msg := fmt.Sprintf("no %s: looked in %s", s.What, strings.Join(s.Places(), ", "))
	if s.Hint != "" {
		msg += "; " + s.Hint
	}
	return errors.New(msg)
}

// The settings of the client commands. The local files are where `corral
// up` keeps them under its default --data.
var (
	Station = Setting{What: "station URL", Flag: "--station", Env: "CORRAL_STATION", Key: KeyStation,
		Default: "https://127.0.0.1:7600"}
	StationCA = Setting{What: "station CA", Flag: "--ca", Env: "CORRAL_STATION_CA",
		Local: []string{"corral-data/mgmt/tls/ca.pem"}, Key: KeyStationCA}
	StationToken = Setting{What: "API token", Flag: "--token-file", Env: "CORRAL_MGMT_TOKEN_FILE",
		Local: []string{"corral-data/mgmt/admin.token"}, Key: KeyStationTokenFile, Later: loginToken,
		Hint: "run 'corral mgmt login --user NAME' (it records the token for every directory), or give --token-file (the station's DATA/admin.token)"}
	Meta = Setting{What: "metadata members", Flag: "--meta", Env: "CORRAL_META", Key: KeyMeta,
		Default: "127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402"}
	Secret = Setting{What: "cluster secret", Flag: "--secret-file", Env: "CORRAL_SECRET_FILE",
		Local: []string{"corral-data/meta/cluster.secret"}, Key: KeySecretFile,
		Hint: "run 'corral up' (it records where its cluster's secret is for every directory), or give --secret-file META_DATA/cluster.secret"}
	DirectorAdmin = Setting{What: "director admin API", Flag: "--admin", Env: "CORRAL_ADMIN", Key: KeyDirectorAdmin,
		Default: "127.0.0.1:7500"}
	DirectorToken = Setting{What: "director admin token", Flag: "--token-file", Env: "CORRAL_ADMIN_TOKEN_FILE",
		Local: []string{"corral-data/admin.token", "admin.token"}, Key: KeyDirectorTokenFile,
		Hint: "give --token-file with the director's admin.token (written beside its configuration), or run 'corral up', which records its director's"}
)

// LoginTokenName is the file in Dir where 'corral mgmt login' keeps the
// token by default.
const LoginTokenName = "token"

func loginToken() []string {
	d, err := Dir()
	if err != nil {
		return nil
	}
	return []string{filepath.Join(d, LoginTokenName)}
}
