// Package clustercfg is the cluster's one declarative configuration: the
// YAML document the management station keeps in etcd, versions and hands
// out (docs/config.md lists every field; docs/config.schema.json is its
// JSON Schema, generated from these types and their comments).
//
// It parses with line numbers (every error names its YAML path and line),
// validates fields against each other, diffs two versions, imports the
// director's old configuration file, and cuts the part each role applies
// (DirectorView, NodeView; meta reads FileSystem). Where it comes from (a file,
// the station) is not its business.
package clustercfg

// Config is a whole cluster configuration: one version at the station.
type Config struct {
	// Clusters are the logical clusters: named partitions of the node pool
	// (paper 001). A node belongs to at most one; a service is served by
	// the nodes of its cluster.
	Clusters []Cluster `yaml:"clusters,omitempty" json:"clusters,omitempty"`
	// Nodes are the web nodes (real servers) the station knows.
	Nodes []Node `yaml:"nodes,omitempty" json:"nodes,omitempty"`
	// Directors are the load balancers; each applies every service.
	Directors []Director `yaml:"directors,omitempty" json:"directors,omitempty"`
	// Services are the virtual services: a VIP (any port, TCP or UDP) and
	// the pool behind it.
	Services []Service `yaml:"services,omitempty" json:"services,omitempty"`
	// Domains are the name-based virtual domains; several may share a VIP.
	Domains []Domain `yaml:"domains,omitempty" json:"domains,omitempty"`
	// QoS are the request classes of the feedback/QoS scheduler (paper 003).
	QoS []QoSClass `yaml:"qos,omitempty" json:"qos,omitempty"`
	// Feedback is how the station polls the servers' load for the
	// services with weights feedback (paper 003, docs/feedback.md): the
	// station runs the monitor and hands the weights to the directors.
	Feedback *Feedback `yaml:"feedback,omitempty" json:"feedback,omitempty"`
	// FileSystem is where the content lives and how it is laid out.
	FileSystem FileSystem `yaml:"filesystem,omitempty" json:"filesystem,omitempty"`
	// Accounts are the people who may use the station's API; passwords
	// and tokens are kept apart from the configuration.
	Accounts []Account `yaml:"accounts,omitempty" json:"accounts,omitempty"`
}

// Cluster is one logical cluster.
type Cluster struct {
	// Name identifies the cluster (letters, digits, '-', '_', '.').
	Name string `yaml:"name" json:"name"`
	// Description is free text shown on the dashboard.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
}

// Node is one web node.
type Node struct {
	// Name identifies the node; it is also the name it joins with
	// (letters, digits, '-', '_', '.', ':').
	Name string `yaml:"name" json:"name"`
	// Address is where the node serves requests (host:port).
	Address string `yaml:"address" json:"address"`
	// Admin is the node's admin listener (/healthz, /load, /metrics);
	// default: the address's host, port 9080.
	Admin string `yaml:"admin,omitempty" json:"admin,omitempty"`
	// Cluster is the logical cluster the node serves in.
	Cluster string `yaml:"cluster,omitempty" json:"cluster,omitempty"`
	// Weight is the node's scheduler weight in every service of its
	// cluster (0..65535; 0 drains it). Default 1.
	Weight *int `yaml:"weight,omitempty" json:"weight,omitempty"`
	// DefaultDomain serves requests whose Host has no directory.
	DefaultDomain string `yaml:"default-domain,omitempty" json:"default-domain,omitempty"`
}

// Director is one director (load balancer).
type Director struct {
	// Name identifies the director; it is also the name it joins with
	// (letters, digits, '-', '_', '.', ':').
	Name string `yaml:"name" json:"name"`
	// Admin is the director's admin API address (keep it on loopback).
	// Default 127.0.0.1:7500.
	Admin string `yaml:"admin,omitempty" json:"admin,omitempty"`
	// Interface is the link the XDP dataplane attaches to.
	Interface string `yaml:"interface,omitempty" json:"interface,omitempty"`
	// XDPMode is auto, native or generic. Default auto.
	XDPMode string `yaml:"xdp-mode,omitempty" json:"xdp-mode,omitempty"`
	// XDPConns is the XDP connection table's size (1024..16777216).
	// Default 262144.
	XDPConns int `yaml:"xdp-conns,omitempty" json:"xdp-conns,omitempty"`
	// HA makes the director one of a group: the directors of a group
	// elect one that forwards for the VIPs (active-standby) or all
	// forward behind an ECMP router (active-active), and stream their
	// connection tables to each other. Every service must then use the
	// xdp dataplane and Interface must be set. docs/ha.md.
	HA *DirectorHA `yaml:"ha,omitempty" json:"ha,omitempty"`
}

// DirectorHA is a director's place in an HA group. The station's etcd
// (where the group elects) and the group's key come with the director's
// join, not from here (docs/mgmt.md, "Directors in an HA group").
type DirectorHA struct {
	// Group names the VIP set the group's directors share (letters,
	// digits, '-', '_', '.').
	Group string `yaml:"group" json:"group"`
	// Mode is active-standby (one forwards; another takes over when it
	// fails) or active-active (all forward). Every director of a group
	// has the same. Default active-standby.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// Priority is 1..255: the in-sync director with the highest takes
	// the VIPs back (fail-back); equal ones do not preempt. Default 100.
	Priority int `yaml:"priority,omitempty" json:"priority,omitempty"`
	// Sync is where the director takes its peers' connection streams: an
	// ip:port on its link. No two directors share one.
	Sync string `yaml:"sync" json:"sync"`
	// LeaseTTL is the election lease's time to live, whole seconds
	// (1s..60s): how long a director that stops renewing it keeps the
	// group from electing another. Default 2s.
	LeaseTTL string `yaml:"lease-ttl,omitempty" json:"lease-ttl,omitempty"`
}

// Service is one virtual service.
type Service struct {
	// Name identifies the service.
	Name string `yaml:"name" json:"name"`
	// Cluster is the logical cluster whose nodes serve it; with no
	// Servers listed, every node of the cluster at Port is the pool.
	Cluster string `yaml:"cluster,omitempty" json:"cluster,omitempty"`
	// VIP is the virtual address clients connect to (ip:port).
	VIP string `yaml:"vip" json:"vip"`
	// Protocol is tcp or udp. Default tcp.
	Protocol string `yaml:"protocol,omitempty" json:"protocol,omitempty"`
	// Dataplane is l4, l7 or xdp. Default l4.
	Dataplane string `yaml:"dataplane,omitempty" json:"dataplane,omitempty"`
	// Scheduler is rr, wrr, lc, wlc, sed, nq, sh, mh, or mwlc (l7). Default wlc.
	Scheduler string `yaml:"scheduler,omitempty" json:"scheduler,omitempty"`
	// Port is the nodes' port for a pool made from the cluster's nodes
	// (not with Servers); default: the port of each node's Address.
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// Persistence keeps a client on its server this long (Go duration;
	// not with xdp). Default 0s (off).
	Persistence string `yaml:"persistence,omitempty" json:"persistence,omitempty"`
	// UDPTimeout ends an idle UDP flow. Default 300s.
	UDPTimeout string `yaml:"udp-timeout,omitempty" json:"udp-timeout,omitempty"`
	// TCPTimeout ends an idle established TCP flow (xdp, l4). Default 900s.
	TCPTimeout string `yaml:"tcp-timeout,omitempty" json:"tcp-timeout,omitempty"`
	// TCPFinTimeout ends a TCP flow idle after the client's FIN or RST
	// (xdp; l4: after either side's). Default 120s.
	TCPFinTimeout string `yaml:"tcp-fin-timeout,omitempty" json:"tcp-fin-timeout,omitempty"`
	// MaxConns caps the service's live TCP connections or UDP flows (l4);
	// a new one past it is refused (TCP: reset; UDP: dropped). Default 10000.
	MaxConns int `yaml:"max-conns,omitempty" json:"max-conns,omitempty"`
	// MaxConnsPerSource caps one client address's (IPv6: one /64's) live
	// flows (l4), at most max-conns. Default 1000, or max-conns if lower.
	MaxConnsPerSource int `yaml:"max-conns-per-source,omitempty" json:"max-conns-per-source,omitempty"`
	// InactiveTimeout is how long a closed connection counts as inactive
	// (lc, wlc). Default 60s.
	InactiveTimeout string `yaml:"inactive-timeout,omitempty" json:"inactive-timeout,omitempty"`
	// PassInternal lets the l7 dataplane pass /load, /healthz, /metrics.
	PassInternal bool `yaml:"pass-internal,omitempty" json:"pass-internal,omitempty"`
	// Check is the health check of the pool's servers.
	Check *Check `yaml:"check,omitempty" json:"check,omitempty"`
	// Servers, when given, is the pool instead of the cluster's nodes.
	Servers []RealServer `yaml:"servers,omitempty" json:"servers,omitempty"`
	// QoS names the classes that apply to this service, highest first.
	QoS []string `yaml:"qos,omitempty" json:"qos,omitempty"`
	// QoSPerServer is the admission limit per server with weight > 0: the
	// requests in flight to the pool at most are this many times those
	// servers (l7 with qos classes; not with qos-inflight). Default 32.
	QoSPerServer int `yaml:"qos-per-server,omitempty" json:"qos-per-server,omitempty"`
	// QoSInflight is a fixed admission limit instead: the requests in
	// flight to the pool at most, whatever its size (l7 with qos classes).
	QoSInflight int `yaml:"qos-inflight,omitempty" json:"qos-inflight,omitempty"`
	// QoSReserve keeps, per server with weight > 0, the last slots of the
	// limit for the service's top class (by priority): fewer than
	// qos-per-server, or than qos-inflight (l7 with qos classes). Default 0.
	QoSReserve int `yaml:"qos-reserve,omitempty" json:"qos-reserve,omitempty"`
	// Weights is static (the configured weights) or feedback (the
	// station's monitor sets each server's weight from its measured
	// load; needs the feedback section and a weighted scheduler).
	// Default static.
	Weights string `yaml:"weights,omitempty" json:"weights,omitempty"`
}

// Feedback is the load feedback monitor's settings (the director's
// feedback { } block, docs/feedback.md), run by the station.
type Feedback struct {
	// Source is snmp (each server's snmpd) or agent (each node's admin
	// /load). Default snmp.
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
	// Interval is the poll period, 100ms..1m. Default 2s.
	Interval string `yaml:"interval,omitempty" json:"interval,omitempty"`
	// Timeout bounds one request, 10ms..30s. Default 1s.
	Timeout string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Target is the aggregate load steered to, (0, 10]. Default 1.
	Target float64 `yaml:"target,omitempty" json:"target,omitempty"`
	// Floor is the lowest weight given (and decayed to), 1..65535.
	// Default 1.
	Floor int `yaml:"floor,omitempty" json:"floor,omitempty"`
	// Max is the highest weight, 1..65535. Default 100.
	Max int `yaml:"max,omitempty" json:"max,omitempty"`
	// Smoothing is the newest load's share in the smoothed load, (0, 1];
	// 1 is off. Default 1.
	Smoothing float64 `yaml:"smoothing,omitempty" json:"smoothing,omitempty"`
	// DeadBand: no change while |target - load| is within it, [0, 1].
	// Default 0.05.
	DeadBand *float64 `yaml:"dead-band,omitempty" json:"dead-band,omitempty"`
	// Port is snmpd's port on each server's address. Default 161.
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// SNMPVersion is 2c (community) or 3 (authPriv, the v3 fields).
	// Default 2c.
	SNMPVersion string `yaml:"snmp-version,omitempty" json:"snmp-version,omitempty"`
	// Community is the v2c community, required for 2c unless
	// community-file is given ("public" is not assumed).
	Community string `yaml:"community,omitempty" json:"community,omitempty"`
	// CommunityFile is an absolute path on the station holding the v2c
	// community instead.
	CommunityFile string `yaml:"community-file,omitempty" json:"community-file,omitempty"`
	// V3User is the v3 user name.
	V3User string `yaml:"v3-user,omitempty" json:"v3-user,omitempty"`
	// V3AuthProto is SHA, SHA224, SHA256, SHA384, SHA512 or MD5.
	V3AuthProto string `yaml:"v3-auth-proto,omitempty" json:"v3-auth-proto,omitempty"`
	// V3AuthFile is an absolute path on the station holding the v3
	// auth passphrase.
	V3AuthFile string `yaml:"v3-auth-file,omitempty" json:"v3-auth-file,omitempty"`
	// V3PrivProto is AES, AES192, AES256, AES192C, AES256C or DES.
	V3PrivProto string `yaml:"v3-priv-proto,omitempty" json:"v3-priv-proto,omitempty"`
	// V3PrivFile is an absolute path on the station holding the v3 priv
	// passphrase.
	V3PrivFile string `yaml:"v3-priv-file,omitempty" json:"v3-priv-file,omitempty"`
	// AgentPort is the node's admin port on each server's address.
	// Default 9080.
	AgentPort int `yaml:"agent-port,omitempty" json:"agent-port,omitempty"`
	// IfName is the interface measured (snmp's ifName). Default eth0.
	IfName string `yaml:"ifname,omitempty" json:"ifname,omitempty"`
	// Bandwidth is the link speed for equation 3 when the server reports
	// none (100mbit, 1gbit, or bit/s).
	Bandwidth string `yaml:"bandwidth,omitempty" json:"bandwidth,omitempty"`
	// CPU is laload (the paper's equation 7) or cpuraw (busy share
	// between polls). Default laload.
	CPU string `yaml:"cpu,omitempty" json:"cpu,omitempty"`
	// LoadMinutes is x of laLoad_x: 1, 5 or 15. Default 1.
	LoadMinutes int `yaml:"load-minutes,omitempty" json:"load-minutes,omitempty"`
	// SourceAddr is the station's address to poll from (default: the
	// kernel's choice).
	SourceAddr string `yaml:"source-addr,omitempty" json:"source-addr,omitempty"`
}

// Check is a health check.
type Check struct {
	// Type is tcp, http, exec or none. Default tcp.
	Type string `yaml:"type,omitempty" json:"type,omitempty"`
	// Port, if set, is checked instead of the server's port (a node's
	// /healthz is on its admin port).
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// Path is the http check's request path. Default /healthz.
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
	// Status is the http check's expected status. Default 200.
	Status int `yaml:"status,omitempty" json:"status,omitempty"`
	// Body is a substring the http response must contain.
	Body string `yaml:"body,omitempty" json:"body,omitempty"`
	// Command is the exec check's program and arguments.
	Command []string `yaml:"command,omitempty" json:"command,omitempty"`
	// Interval between checks. Default 2s.
	Interval string `yaml:"interval,omitempty" json:"interval,omitempty"`
	// Timeout of one check. Default 1s.
	Timeout string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Rise is the successes in a row that bring a server back. Default 2.
	Rise int `yaml:"rise,omitempty" json:"rise,omitempty"`
	// Fall is the failures in a row that take a server out. Default 3.
	Fall int `yaml:"fall,omitempty" json:"fall,omitempty"`
}

// RealServer is one member of an explicit pool.
type RealServer struct {
	// Address is the server's ip:port.
	Address string `yaml:"address" json:"address"`
	// Weight is 0..65535 (0 drains). Default 1.
	Weight *int `yaml:"weight,omitempty" json:"weight,omitempty"`
}

// Domain is one name-based virtual domain.
type Domain struct {
	// Name is the host name clients ask for (www.example.test).
	Name string `yaml:"name" json:"name"`
	// Service is the service (by name) whose VIP serves the domain.
	Service string `yaml:"service" json:"service"`
	// Docroot is the domain's directory in the file system; default
	// filesystem.docroot/NAME.
	Docroot string `yaml:"docroot,omitempty" json:"docroot,omitempty"`
	// Webmaster is the account that may upload to Docroot.
	Webmaster string `yaml:"webmaster,omitempty" json:"webmaster,omitempty"`
}

// QoSClass is one request class (paper 003's differentiated service).
type QoSClass struct {
	// Name identifies the class.
	Name string `yaml:"name" json:"name"`
	// Priority orders classes: higher is served first.
	Priority int `yaml:"priority" json:"priority"`
	// Match selects the requests of this class; a request takes the
	// first class, in priority order, that matches.
	Match QoSMatch `yaml:"match,omitempty" json:"match,omitempty"`
	// Rate limits the class's requests per second (0: no limit).
	Rate float64 `yaml:"rate,omitempty" json:"rate,omitempty"`
	// Concurrency limits its requests in flight (0: no limit).
	Concurrency int `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// Overload is what happens to a request over the limits: queue
	// (wait up to Deadline, then 503) or reject (503 at once).
	Overload string `yaml:"overload,omitempty" json:"overload,omitempty"`
	// Deadline is how long a queued request may wait. Default 1s.
	Deadline string `yaml:"deadline,omitempty" json:"deadline,omitempty"`
	// RetryAfter is the Retry-After of a 503, in seconds. Default 1.
	RetryAfter int `yaml:"retry-after,omitempty" json:"retry-after,omitempty"`
}

// QoSMatch are a class's conditions; all given ones must hold.
type QoSMatch struct {
	// Networks are client networks (CIDR).
	Networks []string `yaml:"networks,omitempty" json:"networks,omitempty"`
	// Prefixes are URL path prefixes.
	Prefixes []string `yaml:"prefixes,omitempty" json:"prefixes,omitempty"`
	// Regex is a regular expression on the URL path (RE2).
	Regex string `yaml:"regex,omitempty" json:"regex,omitempty"`
	// Domains are virtual domains (Host).
	Domains []string `yaml:"domains,omitempty" json:"domains,omitempty"`
	// Users are authenticated users.
	Users []string `yaml:"users,omitempty" json:"users,omitempty"`
	// Header is "Name: value" that must be present.
	Header string `yaml:"header,omitempty" json:"header,omitempty"`
}

// FileSystem is the parallel file system's part of the configuration.
type FileSystem struct {
	// Meta are the metadata members (host:port), in order.
	Meta []string `yaml:"meta,omitempty" json:"meta,omitempty"`
	// Docroot is the directory of the virtual domains. Default /www.
	Docroot string `yaml:"docroot,omitempty" json:"docroot,omitempty"`
	// Layouts are per-directory layout, placement and replica policies,
	// applied by meta's leader (like `corral fs layout set`).
	Layouts []Layout `yaml:"layouts,omitempty" json:"layouts,omitempty"`
}

// Layout is one directory's policy for the files created in it.
type Layout struct {
	// Path is the directory (absolute, in the file system).
	Path string `yaml:"path" json:"path"`
	// StripeSize is the stripe unit (64K, 1M; 0 inherits).
	StripeSize string `yaml:"stripe-size,omitempty" json:"stripe-size,omitempty"`
	// StripeCount is the number of I/O servers (0 inherits, -1 all).
	StripeCount int `yaml:"stripe-count,omitempty" json:"stripe-count,omitempty"`
	// Replicas is the copies of each stripe unit (1..5; 0 inherits).
	Replicas int `yaml:"replicas,omitempty" json:"replicas,omitempty"`
	// Placement is striped or whole ("" inherits).
	Placement string `yaml:"placement,omitempty" json:"placement,omitempty"`
}

// Account is one user of the station's API.
type Account struct {
	// Name is the user name.
	Name string `yaml:"name" json:"name"`
	// Role is admin, webmaster or read-only.
	Role string `yaml:"role" json:"role"`
	// Domains are the domains a webmaster may upload to.
	Domains []string `yaml:"domains,omitempty" json:"domains,omitempty"`
}
