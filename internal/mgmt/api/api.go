// Package api is the management station's HTTP API on the wire: the
// routes, the JSON bodies, and a client (used by `corral cfg`, `corral
// mgmt`, `corral ctl status` and every member's agent). The station
// (internal/mgmt) serves it; docs/mgmt.md describes it.
//
// Every call carries "Authorization: Bearer TOKEN": a user's API token
// (admin, webmaster or read-only), a member's credential (issued at join),
// or the bootstrap admin token the station writes on first start
// (DATA/admin.token, 0600). Errors are JSON Error bodies with the HTTP
// status: 400 bad input (Errors name YAML path and line), 401 no or bad
// token, 403 role not allowed, 404, 409 stale base version.
package api

import (
	"encoding/json"
	"time"
)

// Routes (all under https://STATION).
const (
	// Configuration.
	RouteConfig   = "/v1/config"           // GET: current Version (with YAML); PUT ApplyRequest -> ApplyReply
	RouteVersion  = "/v1/config/versions/" // GET /v1/config/versions/N: that Version
	RouteHistory  = "/v1/config/history"   // GET ?limit=N: []Version newest first, without YAML
	RouteDiff     = "/v1/config/diff"      // POST ApplyRequest (YAML) -> ApplyReply with Diff, nothing stored; GET ?from=A&to=B
	RouteRollback = "/v1/config/rollback"  // POST RollbackRequest -> ApplyReply (a new version equal to an old one)
	RouteTx       = "/v1/tx"               // POST TxRequest -> ApplyReply: several changes, one version
	RouteSchema   = "/v1/config/schema"    // GET: the JSON Schema

	// Members.
	RouteJoin    = "/v1/join"    // POST JoinRequest (join token as bearer) -> JoinReply
	RouteDesired = "/v1/desired" // GET ?after=REV&wait=30s (member credential): Desired, long-poll
	RouteReport  = "/v1/report"  // POST MemberStatus (member credential)
	RouteMembers = "/v1/members" // GET: []MemberStatus
	RouteDrain   = "/v1/drain"   // POST DrainRequest: drain or undrain a node (weight 0 everywhere)
	RouteStatus  = "/v1/status"  // GET: Overview (what the dashboard shows)
	RouteEvents  = "/v1/events"  // GET: Server-Sent Events: "overview" (Overview JSON) every second, "event" (Event)
	RouteSD      = "/v1/sd"      // GET: Prometheus HTTP service discovery ([]SDTarget)
	RouteAudit   = "/v1/audit"   // GET ?limit=N: []AuditEntry newest first
	RouteBackup  = "/v1/backup"  // GET (admin): the backup file (etcd snapshot + configuration history), streamed
	// RouteFeedback: GET ?after=SEQ&wait=30s (any user or member): the
	// station's feedback publication (director.FeedbackStatus), long-poll;
	// 204 when wait passes with nothing newer.
	RouteFeedback = "/v1/feedback"

	// Accounts and tokens.
	RouteLogin  = "/v1/login"   // POST LoginRequest (no bearer) -> LoginReply
	RouteUsers  = "/v1/users"   // GET []User; POST UserRequest (create/replace; admin)
	RouteUser   = "/v1/users/"  // DELETE /v1/users/NAME (admin)
	RouteTokens = "/v1/tokens"  // GET []Token; POST TokenRequest -> Token (with Secret, shown once)
	RouteToken  = "/v1/tokens/" // DELETE /v1/tokens/ID: revoke

	// Content: a webmaster's upload into their domain's docroot.
	RouteFiles = "/v1/files/" // PUT /v1/files/DOMAIN/PATH (body: the file); DELETE likewise

	// Rolling upgrade.
	RouteRollout = "/v1/rollout"         // POST RolloutRequest (binary uploaded first) -> Rollout; GET: current Rollout
	RouteBinary  = "/v1/rollout/binary/" // PUT /v1/rollout/binary/SHA256 (admin); GET (member credential): the binary

	// Health and metrics of the station itself.
	RouteHealthz = "/healthz"
	RouteMetrics = "/metrics"
)

// Roles of users and members.
const (
	RoleAdmin     = "admin"
	RoleWebmaster = "webmaster"
	RoleReadOnly  = "read-only"

	RoleDirector = "director"
	RoleNode     = "node"
	RoleMeta     = "meta"
	RoleIOD      = "iod"
)

// Version is one stored configuration.
type Version struct {
	Version int64     `json:"version"`
	Parent  int64     `json:"parent"` // the version it was applied on (0 for the first)
	Author  string    `json:"author"`
	Comment string    `json:"comment,omitempty"`
	Time    time.Time `json:"time"`
	YAML    string    `json:"yaml,omitempty"`
}

// ApplyRequest stores YAML as the next version. Base is the version the
// caller edited; if the current one is another, the station answers 409
// (Error.Current says which). Base -1: no check (force).
type ApplyRequest struct {
	Base    int64  `json:"base"`
	YAML    string `json:"yaml"`
	Comment string `json:"comment,omitempty"`
	DryRun  bool   `json:"dry_run,omitempty"`
}

// ApplyReply says what an apply (or diff) did.
type ApplyReply struct {
	Version   int64  `json:"version"` // the new current version (the old one if Unchanged or DryRun)
	Diff      string `json:"diff"`    // unified diff of the canonical YAML, old to new
	Unchanged bool   `json:"unchanged,omitempty"`
}

// RollbackRequest makes a new version whose content is version To.
type RollbackRequest struct {
	To      int64  `json:"to"`
	Base    int64  `json:"base"`
	Comment string `json:"comment,omitempty"`
}

// TxRequest applies several changes on Base as one version.
type TxRequest struct {
	Base    int64  `json:"base"`
	Comment string `json:"comment,omitempty"`
	Ops     []TxOp `json:"ops"`
}

// TxOp is one change: put (add or replace by name) or delete an item of
// a section. Kind: cluster, node, director, service, domain, qos, layout
// (named by path), account, or feedback (the one section that is not a
// list: put whole, deleted by the name "feedback").
type TxOp struct {
	Op    string          `json:"op"` // put | delete
	Kind  string          `json:"kind"`
	Name  string          `json:"name,omitempty"`  // delete: the item's name (a layout's path)
	Value json.RawMessage `json:"value,omitempty"` // put: the item, as JSON with the YAML field names
}

// Error is every error body.
type Error struct {
	Error   string       `json:"error"`
	Errors  []FieldError `json:"errors,omitempty"`
	Current int64        `json:"current,omitempty"` // 409: the current version
}

// FieldError is one configuration error at a place.
type FieldError struct {
	Path string `json:"path"` // YAML path: services[1].vip
	Line int    `json:"line"`
	Msg  string `json:"msg"`
}

// JoinRequest: a new member asks for its credential and configuration;
// the join token goes as the bearer.
type JoinRequest struct {
	Role string `json:"role"`
	Name string `json:"name"`
	Addr string `json:"addr"` // where it serves (a node: its service address)
}

// JoinReply carries what a member needs to run.
type JoinReply struct {
	Member     string   `json:"member"`
	Credential string   `json:"credential"` // bearer for RouteDesired, RouteReport, RouteBinary
	CA         string   `json:"ca"`         // PEM of the station's CA
	Secret     []byte   `json:"secret"`     // file-system credential: read-only for nodes and directors, the cluster secret for meta and iods
	Meta       []string `json:"meta"`       // metadata members
	Stations   []string `json:"stations"`   // every station's API address
	// HA is a director's access to the station's etcd, where the
	// directors of an HA group elect (role director only).
	HA *HAJoin `json:"ha,omitempty"`
	// TLS is the member's certificate, signed by the station's CA (nil
	// from a station without one).
	TLS *MemberTLS `json:"tls,omitempty"`
}

// MemberTLS is a member's certificate for the file-system protocol: server
// and client use, naming the member's address, loopback and localhost.
type MemberTLS struct {
	Cert string `json:"cert"` // PEM
	Key  string `json:"key"`  // PEM, the certificate's private key
	CA   string `json:"ca"`   // PEM of the CA that signed it
}

// HAJoin is what a director needs to take part in an HA group
// (internal/ha): the station's etcd and the group's shared sync key.
type HAJoin struct {
	// Etcd are the stations' etcd client URLs, the non-loopback ones
	// when the stations have them (https: TLS with client certificates).
	Etcd []string `json:"etcd"`
	// CA is the PEM of the CA the etcd listeners' certificates are
	// signed by and client certificates must be signed by.
	CA string `json:"ca"`
	// Cert and Key are the director's etcd client certificate (common
	// name: the member name, etcd's user name) and key, PEM.
	Cert string `json:"cert"`
	Key  string `json:"key"`
	// SyncKey authenticates the connection streams between the
	// directors (32 bytes, one for every group of the cluster).
	SyncKey []byte `json:"sync_key"`
}

// Desired is what a member should run; Rev changes whenever any of it
// changes, so a member long-polls with after=Rev.
type Desired struct {
	Rev     int64        `json:"rev"`
	Version int64        `json:"version"` // configuration version
	YAML    string       `json:"yaml"`
	Drained []string     `json:"drained,omitempty"` // node names drained (weight 0 in every service)
	Binary  *BinaryOrder `json:"binary,omitempty"`  // rolling upgrade: this member should run this binary
}

// BinaryOrder tells a member to run another binary (RouteBinary+SHA256).
type BinaryOrder struct {
	SHA256  string `json:"sha256"`
	Rollout string `json:"rollout"`          // rollout ID
	Revert  bool   `json:"revert,omitempty"` // go back to the binary run before this rollout
	// Check is how long the new binary has to be confirmed (reported
	// healthy while the order stands) before it reverts by itself.
	Check time.Duration `json:"check,omitempty"`
}

// MemberStatus is what a member reports every second (and the station
// shows, with Seen).
type MemberStatus struct {
	Name    string          `json:"name"`
	Role    string          `json:"role"`
	Addr    string          `json:"addr"`
	Version int64           `json:"version"`         // configuration version applied
	Error   string          `json:"error,omitempty"` // why the last version could not be applied (the old one runs)
	Healthy bool            `json:"healthy"`
	Health  string          `json:"health,omitempty"`  // why not healthy
	Build   string          `json:"build"`             // sha256 of the running binary
	Metrics string          `json:"metrics,omitempty"` // URL of its /metrics
	Started time.Time       `json:"started"`
	Report  json.RawMessage `json:"report,omitempty"` // role-specific: a director's []director.ServiceStatus
	Seen    time.Time       `json:"seen"`             // set by the station
	Up      bool            `json:"up"`               // set by the station: reported within the last 5 s
}

// DrainRequest drains (weight 0 in every service) or undrains a node.
type DrainRequest struct {
	Node  string `json:"node"`
	Drain bool   `json:"drain"`
}

// Event is one thing that happened, for the dashboard and the log.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // apply, rollback, join, member-up, member-down, apply-error, drain, rollout, ...
	Member  string    `json:"member,omitempty"`
	Version int64     `json:"version,omitempty"`
	Msg     string    `json:"msg"`
}

// Overview is the dashboard's picture of the cluster.
type Overview struct {
	Time     time.Time      `json:"time"`
	Version  int64          `json:"version"`
	Members  []MemberStatus `json:"members"`
	Servers  []IOServer     `json:"servers"` // I/O servers, from meta
	Meta     []MetaMember   `json:"meta"`    // metadata members
	Drained  []string       `json:"drained,omitempty"`
	Events   []Event        `json:"events"` // newest last, at most 50
	Stations []string       `json:"stations"`
}

// IOServer is one I/O server as meta knows it.
type IOServer struct {
	ID     uint32 `json:"id"`
	Addr   string `json:"addr"`
	State  string `json:"state"`
	Zone   string `json:"zone,omitempty"`
	Total  int64  `json:"total"`
	Free   int64  `json:"free"`
	Stale  int64  `json:"stale"`  // bytes still to heal onto it
	Healed int64  `json:"healed"` // bytes healed onto it
}

// MetaMember is one metadata member.
type MetaMember struct {
	Addr   string `json:"addr"`
	Leader bool   `json:"leader"`
	Up     bool   `json:"up"`
	Error  string `json:"error,omitempty"`
}

// SDTarget is one entry of Prometheus HTTP service discovery.
type SDTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// AuditEntry is one change, who made it and the version it made.
type AuditEntry struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	User    string    `json:"user"`
	Action  string    `json:"action"` // apply, rollback, tx, user-add, token-create, token-revoke, drain, upload, rollout, restore, ...
	Version int64     `json:"version,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

// LoginRequest trades a password for an API token.
type LoginRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// LoginReply is the API token (valid TTL).
type LoginReply struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// User is one account (no password).
type User struct {
	Name    string   `json:"name"`
	Role    string   `json:"role"`
	Domains []string `json:"domains,omitempty"`
}

// UserRequest creates or replaces a user.
type UserRequest struct {
	User
	Password string `json:"password"`
}

// TokenRequest makes a token: a join token for a member role (director,
// node, meta, iod), or an API token for a user (Role = the user's role,
// User set).
type TokenRequest struct {
	Role string `json:"role"`
	User string `json:"user,omitempty"`
	// Cluster (node join tokens): the logical cluster a node joining with
	// it enters; a node not yet in the configuration is added to it (a new
	// version) at the address it joins with.
	Cluster string        `json:"cluster,omitempty"`
	TTL     time.Duration `json:"ttl"`
	// A join token is good for one join unless MultiUse: a token that
	// leaks after its first use then opens nothing. SingleUse is the
	// default and is kept for older clients; giving both is an error.
	SingleUse bool `json:"single_use,omitempty"`
	MultiUse  bool `json:"multi_use,omitempty"`
}

// Token describes one token; Secret only in the reply that made it.
type Token struct {
	ID        string    `json:"id"`
	Secret    string    `json:"secret,omitempty"`
	Role      string    `json:"role"`
	User      string    `json:"user,omitempty"`
	Cluster   string    `json:"cluster,omitempty"` // node join tokens: the logical cluster a new node enters
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
	Expires   time.Time `json:"expires"`
	SingleUse bool      `json:"single_use,omitempty"`
	Used      bool      `json:"used,omitempty"`
	Revoked   bool      `json:"revoked,omitempty"`
}

// FileReply answers a PUT or DELETE of RouteFiles: the file's domain,
// its path inside the domain's directory, and the bytes written.
type FileReply struct {
	Domain string `json:"domain"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
}

// RolloutRequest starts a rolling upgrade to the binary with SHA256
// (uploaded to RouteBinary first), over Members (default: every member,
// nodes first, directors last).
type RolloutRequest struct {
	SHA256  string        `json:"sha256"`
	Members []string      `json:"members,omitempty"`
	Check   time.Duration `json:"check,omitempty"` // how long a member has to come back healthy (default 30 s)
	Drain   time.Duration `json:"drain,omitempty"` // how long a drained node may take to finish its connections (default 10 s)
}

// Rollout is a rolling upgrade's progress.
type Rollout struct {
	ID      string        `json:"id"`
	SHA256  string        `json:"sha256"`
	State   string        `json:"state"` // running, done, failed
	Steps   []RolloutStep `json:"steps"`
	Error   string        `json:"error,omitempty"`
	Started time.Time     `json:"started"`
	Ended   time.Time     `json:"ended,omitempty"`
}

// RolloutStep is one member's upgrade.
type RolloutStep struct {
	Member string `json:"member"`
	State  string `json:"state"` // waiting, draining, swapping, checking, reverting, done, rolled-back, failed
	Error  string `json:"error,omitempty"`
}
