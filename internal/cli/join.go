package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/safefile"
	"github.com/spf13/pflag"
)

// joinFlags are the member flags of every role that can take its
// configuration from a management station (docs/mgmt.md, "Joining").
type joinFlags struct {
	join, token, tokenFile, name, state, ca string
}

// raftJoin is what meta's --join holds when given without a value: the
// Raft group entry it meant before stations existed.
const raftJoin = "\x00raft"

// add registers the flags. tokenFileFlag names the token file's flag
// (the director's --token-file is its admin API token). For meta,
// --join without a value keeps its Raft meaning (see metaJoin).
func (j *joinFlags) add(fs *pflag.FlagSet, role, tokenFileFlag string) {
	help := "management station API URL(s), comma-separated: join it and take this " + role + "'s configuration from it"
	fs.StringVar(&j.join, "join", "", help)
	if role == api.RoleMeta {
		fs.Lookup("join").Usage = help + "; without a URL (with --id): enter a Raft group after 'corral fs meta add'"
		fs.Lookup("join").NoOptDefVal = raftJoin
	}
	fs.StringVar(&j.token, "token", "", "join token ID.SECRET.CAHASH from 'corral mgmt token create --role "+role+"' (needed for the first join only)")
	fs.StringVar(&j.tokenFile, tokenFileFlag, "", "file holding the join token (instead of --token)")
	fs.StringVar(&j.name, "name", "", "this member's name at the station (default: role and listen address)")
	fs.StringVar(&j.state, "state", "", "directory keeping the station credential (mode 0600) so that restarts need no token")
	fs.StringVar(&j.ca, "station-ca", "", "the station's CA certificate (PEM); default: trust the CA whose hash the token carries")
}

// enabled says whether --join names a station.
func (j *joinFlags) enabled() bool { return j.join != "" && j.join != raftJoin }

// metaJoin sorts out meta's --join: given as --join URL (space, not =)
// pflag leaves URL as an argument. raft says a Raft join was meant.
func (j *joinFlags) metaJoin(args []string) (raft bool, err error) {
	switch {
	case j.join == raftJoin && len(args) == 1 && (strings.HasPrefix(args[0], "https://") || strings.HasPrefix(args[0], "http://")):
		j.join = args[0]
		return false, nil
	case j.join == raftJoin && len(args) == 1 && looksHostPort(args[0]):
		return false, usageError{fmt.Errorf("--join %s: want a station URL such as https://%s (without one, --join enters a Raft group)", args[0], args[0])}
	case len(args) > 0:
		return false, usageError{fmt.Errorf("unexpected argument(s) %q", args)}
	}
	return j.join == raftJoin, nil
}

// looksHostPort says whether s is HOST:PORT (a station's address given
// without https://).
func looksHostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	return err == nil && port != ""
}

// options builds the agent's options from the flags; defName and
// defState are the role's defaults.
func (j *joinFlags) options(role, defName, defState string, log *slog.Logger) (agent.Options, error) {
	o := agent.Options{Role: role, Name: j.name, State: j.state, CAFile: j.ca, Token: strings.TrimSpace(j.token), Log: log}
	o.Stations = splitList(j.join)
	if j.tokenFile != "" {
		if o.Token != "" {
			return o, usageError{errors.New("--token and the token file exclude each other")}
		}
		b, err := safefile.ReadSecret(j.tokenFile)
		if err != nil {
			return o, fmt.Errorf("join token: %w", err)
		}
		o.Token = strings.TrimSpace(string(b))
	}
	if o.Name == "" {
		o.Name = defName
	}
	if o.State == "" {
		o.State = defState
	}
	return o, nil
}

// defaultState is where a member without --state keeps its credential
// when it has no data directory of its own.
func defaultState(name string) string {
	return filepath.Join("corral-data", "agent", strings.NewReplacer(":", "_", "/", "_").Replace(name))
}

// joinSecret is the file-system credential handed over by the join, also
// written to STATE/fs.secret (0600), whose path it returns for the roles
// that read the credential from the environment.
func joinSecret(state string, secret []byte) (*proto.Credential, string, error) {
	if len(secret) == 0 {
		return nil, "", errors.New("join: the station handed over no file-system credential (start the station with the cluster secret, or give --secret-file)")
	}
	c, err := proto.ParseCredential(secret)
	if err != nil {
		return nil, "", fmt.Errorf("join: the station's file-system credential: %w", err)
	}
	p := filepath.Join(state, "fs.secret")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, "", err
	}
	// Written whole (a crash leaves the old file or the new one) and 0600
	// even when an earlier file holds the same text with another mode.
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 || !sameFile(p, secret) {
		if err := writeFileAtomic(p, secret, 0o600); err != nil {
			return nil, "", fmt.Errorf("join: %w", err)
		}
	}
	return c, p, nil
}

// sameFile says whether the file at p holds b.
func sameFile(p string, b []byte) bool {
	old, err := os.ReadFile(p)
	return err == nil && bytes.Equal(old, b)
}

// runAgent runs a in the background; the returned wait stops nothing
// (ctx does) but waits for it to end.
func runAgent(ctx context.Context, a *agent.Agent) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.Run(ctx) }()
	return wg.Wait
}
