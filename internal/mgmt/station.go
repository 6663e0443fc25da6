// Package mgmt is the management station (`corral mgmt`, paper 001's EMS):
// the cluster configuration in etcd (an embedded member by default, or an
// external cluster), versioned, validated and handed to every member; the
// HTTP API under /v1 (package api) with accounts, tokens and an audit log;
// join; backup and restore; the dashboard; rolling upgrades. docs/mgmt.md.
//
// Files: store.go (etcd, versions, history, members), server.go (HTTP,
// TLS, routes), auth.go (users, tokens, roles), backup.go, dash.go and
// web/ (dashboard, events), upload.go (webmasters' files), rollout.go.
package mgmt

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Options configure a station.
type Options struct {
	// Data is the station's directory: etcd's data (DATA/etcd), the CA and
	// server certificate (DATA/tls), the bootstrap admin token
	// (DATA/admin.token, 0600), uploaded binaries (DATA/binaries).
	Data string
	// Listen is the API's address (HTTPS). Default 127.0.0.1:7600.
	Listen string
	// Etcd, if set, are an external etcd cluster's client endpoints;
	// otherwise the station runs an embedded member with data in DATA/etcd.
	Etcd []string
	// EtcdName, EtcdPeer, EtcdClient and EtcdInitialCluster set up the
	// embedded member; three stations form one etcd cluster by listing
	// each other in EtcdInitialCluster ("a=http://127.0.0.1:7602,b=...").
	// Defaults: name "station", peer 127.0.0.1:7602, client 127.0.0.1:7601.
	EtcdName           string
	EtcdPeer           string
	EtcdClient         string
	EtcdInitialCluster string
	// TLSCert, TLSKey, TLSCA bring your own certificate; otherwise the
	// station makes a CA on first start (DATA/tls/ca.pem) and a server
	// certificate for Listen's host, 127.0.0.1, ::1 and localhost.
	TLSCert, TLSKey, TLSCA string
	// Insecure serves plain HTTP (tests of other packages only).
	Insecure bool
	// Secret is the file-system cluster secret (for meta and iods joining,
	// for the read-only credential of nodes, and for webmaster uploads);
	// nil: those parts are off and say so.
	Secret []byte
	// Meta are the metadata members (for uploads and the I/O servers'
	// status); default: the configuration's filesystem.meta.
	Meta []string
	// Log receives events; nil: slog.Default().
	Log *slog.Logger
	// MemberTimeout: a member not heard from this long is down. Default 5 s.
	MemberTimeout time.Duration
}

// Station is a running management station.
type Station struct {
	opt Options
	log *slog.Logger
}

// New opens (or creates) the station's data and connects to etcd
// (starting the embedded member); Run serves.
func New(opt Options) (*Station, error) { return &Station{opt: opt, log: slog.Default()}, nil }

// Run serves the API until ctx ends; ready is called with the API's
// address once it listens.
func (s *Station) Run(ctx context.Context, ready func(addr string)) error {
	return errors.New("mgmt: not built yet")
}

// Close stops etcd and releases the data.
func (s *Station) Close() error { return nil }
