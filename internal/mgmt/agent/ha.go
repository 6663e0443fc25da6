package agent

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
)

// A director's HA part of its join reply (api.HAJoin) is kept in the
// state directory, mode 0600, for the director's ha block
// (clustercfg.DirectorViewHA): the etcd CA, its client certificate and key,
// and the groups' sync key.
const (
	HACAFile      = "ha-etcd-ca.pem"
	HACertFile    = "ha-etcd-cert.pem"
	HAKeyFile     = "ha-etcd-key.pem"
	HASyncKeyFile = "ha.key"
)

// saveHA writes h's files into the state directory; a reply without an
// HA part removes those of an earlier join (they would name a revoked
// member's certificate).
func (a *Agent) saveHA(h *api.HAJoin) error {
	if a.opt.State == "" {
		return nil
	}
	files := []string{HACAFile, HACertFile, HAKeyFile, HASyncKeyFile}
	if h == nil {
		for _, f := range files {
			if err := os.Remove(filepath.Join(a.opt.State, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("join: %w", err)
			}
		}
		return nil
	}
	if len(h.SyncKey) < 16 {
		return fmt.Errorf("join: the station's HA sync key is %d bytes; want 16 or more", len(h.SyncKey))
	}
	if err := os.MkdirAll(a.opt.State, 0o700); err != nil {
		return fmt.Errorf("join: --state: %w", err)
	}
	// The key as hex text: the director drops a trailing newline from the
	// file, which raw random bytes may end with.
	content := [][]byte{[]byte(h.CA), []byte(h.Cert), []byte(h.Key), []byte(hex.EncodeToString(h.SyncKey) + "\n")}
	for i, f := range files {
		if i < 3 && len(content[i]) == 0 {
			// A station whose etcd takes no TLS (plain, on loopback).
			if err := os.Remove(filepath.Join(a.opt.State, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("join: %w", err)
			}
			continue
		}
		if err := writeSecret(filepath.Join(a.opt.State, f), content[i]); err != nil {
			return fmt.Errorf("join: saving the HA part: %w", err)
		}
	}
	return nil
}

// HAState is the HA part saved in this agent's state directory (nil when
// the join gave none).
func (a *Agent) HAState() (*clustercfg.HAState, error) { return LoadHAState(a.opt.State) }

// LoadHAState reads the HA part a director's join saved in the state
// directory state: the etcd URLs (member.json) and the files' paths. nil
// and no error when there is none (not a director, or a station that
// gave none).
func LoadHAState(state string) (*clustercfg.HAState, error) {
	if state == "" {
		return nil, nil
	}
	b, err := safefile.ReadSecret(filepath.Join(state, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("HA state: %w", err)
	}
	var sv saved
	if err := json.Unmarshal(b, &sv); err != nil {
		return nil, fmt.Errorf("HA state: %s: %w", filepath.Join(state, StateFile), err)
	}
	if len(sv.HAEtcd) == 0 {
		return nil, nil
	}
	st := &clustercfg.HAState{Etcd: sv.HAEtcd, KeyFile: filepath.Join(state, HASyncKeyFile)}
	if _, err := os.Stat(st.KeyFile); err != nil {
		return nil, fmt.Errorf("HA state: %w (join again to have it written)", err)
	}
	ca, cert, key := filepath.Join(state, HACAFile), filepath.Join(state, HACertFile), filepath.Join(state, HAKeyFile)
	n := 0
	for _, f := range []string{ca, cert, key} {
		if _, err := os.Stat(f); err == nil {
			n++
		}
	}
	switch n {
	case 3:
		st.EtcdCA, st.EtcdCert, st.EtcdKey = ca, cert, key
	case 0:
	default:
		return nil, fmt.Errorf("HA state: %s: some of %s, %s, %s are missing (join again to have them written)", state, HACAFile, HACertFile, HAKeyFile)
	}
	return st, nil
}
