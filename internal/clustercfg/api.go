package clustercfg

import (
	"fmt"
	"strings"

	"github.com/corral-cluster/corral/internal/config"
)

// Error is one configuration error at a place: the YAML path
// (services[1].vip) and its line.
type Error struct {
	File string
	Path string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Path, e.Msg)
}

// Errors is every error of one document, in line order.
type Errors []*Error

func (es Errors) Error() string {
	s := ""
	for i, e := range es {
		if i > 0 {
			s += "\n"
		}
		s += e.Error()
	}
	return s
}

// Unwrap lets errors.As find each *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Parse reads and validates a YAML document; file names it in errors.
// A document with errors returns Errors (every one found) and no Config.
func Parse(file string, data []byte) (*Config, error) {
	c, lines, derrs := decodeConfig(file, data)
	if c == nil {
		return nil, derrs
	}
	k := &checker{c: c, file: file, lines: lines}
	k.validate()
	if len(derrs) > 0 {
		// A field that could not be read is left empty: errors that only
		// follow from that (on the same path or around it) are dropped.
		kept := derrs
		for _, e := range k.errs {
			if !related(e.Path, derrs) {
				kept = append(kept, e)
			}
		}
		k.errs = kept
	} else if len(k.errs) == 0 {
		// Safety net: what the directors would refuse is refused here.
		for i, d := range c.Directors {
			if _, err := DirectorView(c, d.Name, nil); err != nil {
				k.bad(fmt.Sprintf("directors[%d]", i), "%v", err)
			}
		}
	}
	if len(k.errs) > 0 {
		sortErrors(k.errs)
		return nil, k.errs
	}
	return c, nil
}

func related(p string, es Errors) bool {
	for _, e := range es {
		if under(p, e.Path) || under(e.Path, p) {
			return true
		}
	}
	return false
}

// under says whether path p is q or inside it.
func under(p, q string) bool {
	return p == q || (strings.HasPrefix(p, q) && (p[len(q)] == '.' || p[len(q)] == '['))
}

// Marshal is the canonical YAML of c (stable field order; what versions
// store and Diff compares).
func (c *Config) Marshal() ([]byte, error) { return marshal(c) }

// Diff is a unified diff from a to b (canonical YAML), "" when equal.
func Diff(a, b []byte) string { return diff(a, b) }

// ApplyOp applies one transaction change to c (api.TxOp: op put|delete,
// kind cluster|node|director|service|domain|qos|layout|account|feedback,
// name for delete, value the item's JSON for put; feedback is one item,
// named "feedback"). The result is validated by the
// caller (Parse of its Marshal).
func (c *Config) ApplyOp(op, kind, name string, value []byte) error {
	return applyOp(c, op, kind, name, value)
}

// Kinds are the item kinds ApplyOp takes, sorted.
func Kinds() []string { return sectionNames() }

// Import turns the director's configuration file into a cluster
// configuration (`corral cfg import FILE`).
func Import(d *config.Director) (*Config, error) { return importDirector(d) }

// DirectorView is the director's configuration cut from c for the
// director named name (its Admin, Interface, XDP settings; every service
// with its pool), drained nodes at weight 0.
//
// A director with an ha entry gets config.HA from it without the
// station's etcd, TLS files and key (DirectorViewHA adds them).
func DirectorView(c *Config, name string, drained []string) (*config.Director, error) {
	return directorView(c, name, drained, nil)
}

// HAState is what a joined director keeps for its HA group (the agent
// saves its join reply's HA part in the member's state directory; see
// agent.LoadHAState): the station's etcd client URLs and the paths of the
// etcd CA, client certificate and key (all empty for a station whose etcd
// takes plain http on loopback), and of the group's sync key.
type HAState struct {
	Etcd                      []string
	EtcdCA, EtcdCert, EtcdKey string
	KeyFile                   string
}

// DirectorViewHA is DirectorView for a director that joined the station:
// its ha entry's config.HA is completed with st (nil: as DirectorView),
// and checked as the director checks it.
func DirectorViewHA(c *Config, name string, drained []string, st *HAState) (*config.Director, error) {
	return directorView(c, name, drained, st)
}

// NodeConfig is what a web node applies.
type NodeConfig struct {
	// Docroot is the directory of the virtual domains.
	Docroot string
	// DefaultDomain serves requests whose Host has no directory.
	DefaultDomain string
	// Domains maps a host name to its directory in the file system
	// (domains whose docroot is not Docroot/NAME, and every configured one).
	Domains map[string]string
	// Meta are the metadata members.
	Meta []string
}

// NodeView is the part of c the node named name applies.
func NodeView(c *Config, name string) (*NodeConfig, error) { return nodeView(c, name) }

// Schema is the JSON Schema of the configuration, generated from these
// types and their doc comments (docs/config.schema.json is its copy).
func Schema() []byte { return append([]byte(nil), schemaJSON...) }
