package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/corral-cluster/corral/internal/clientcfg"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/safefile"
	"github.com/spf13/cobra"
)

// mgmtCmd is `corral mgmt`: the station itself, and its subcommands.
func mgmtCmd() *cobra.Command {
	var opt mgmt.Options
	var etcd, secretFile, metaList, etcdPasswordFile string
	c := &cobra.Command{
		Use:   "mgmt [--data DIR] [--listen HOST:PORT]",
		Short: "Run the management station (one versioned cluster configuration), or talk to it",
		Long: `Run the management station: the cluster configuration in etcd, versioned and
handed to every member that joined; accounts, join tokens and an audit log;
backup; the dashboard. Its API is HTTPS (docs/mgmt.md).

On first start it makes, under --data:
  DATA/etcd          the embedded etcd member's data (none with --etcd)
  DATA/tls/ca.pem    the CA that signs its certificate (members and the
                     client commands trust it; --tls-* bring your own)
                     and the embedded etcd's: both its ports take TLS 1.3
                     with client certificates of this CA only, loopback
                     included, and etcd's auth is on
  DATA/admin.token   a bootstrap admin API token (mode 0600)

It prints "corral mgmt: listening on ADDR" and a line naming those files once
it serves; SIGINT or SIGTERM stop it cleanly.

Three stations form one etcd cluster: make their CA once ('corral mgmt
init-ca DIR1 DIR2 DIR3': their peers trust each other through it), then give
each --etcd-name, its own --etcd-peer and --etcd-client, and the same
--etcd-initial-cluster (https:// peer URLs). Or point every station at an
external etcd cluster with --etcd (and --etcd-ca, --etcd-cert, --etcd-key,
--etcd-user, --etcd-password-file as it needs).

The subcommands talk to a running station (--station, --token-file, --ca;
see 'corral mgmt token --help'). Exit status: 0 done, 1 failed, 2 usage,
3 refused because the configuration changed meanwhile.`,
		Example: `  corral mgmt                                   # ./corral-data/mgmt, https://127.0.0.1:7600
  corral mgmt --data /var/lib/corral/mgmt --secret-file /var/lib/corral/meta/cluster.secret
  corral mgmt --etcd https://10.0.0.1:2379,https://10.0.0.2:2379 --etcd-ca etcd-ca.pem --etcd-cert mgmt.pem --etcd-key mgmt.key
  # three stations, one etcd cluster:
  corral mgmt init-ca s1 s2 s3
  corral mgmt --data s1 --listen 127.0.0.1:7600 --etcd-name s1 --etcd-client 127.0.0.1:7601 --etcd-peer 127.0.0.1:7602 --etcd-initial-cluster s1=https://127.0.0.1:7602,s2=https://127.0.0.2:7602,s3=https://127.0.0.3:7602
  T=$(corral mgmt token create --role node --ttl 1h)   # then: corral node --join https://127.0.0.1:7600 --token "$T"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return errors.New(msg + " (see 'corral mgmt --help')")
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, a := range []struct{ flag, v string }{{"listen", opt.Listen}, {"etcd-peer", opt.EtcdPeer}, {"etcd-client", opt.EtcdClient}} {
				if _, port, err := net.SplitHostPort(a.v); err != nil || port == "" {
					return usageError{fmt.Errorf("--%s %q: want HOST:PORT, such as 127.0.0.1:7600", a.flag, a.v)}
				}
			}
			for _, e := range splitList(etcd) {
				if u, err := url.Parse(e); err != nil || u.Host == "" {
					return usageError{fmt.Errorf("--etcd %q: want endpoint URLs such as http://127.0.0.1:2379", e)}
				}
				opt.Etcd = append(opt.Etcd, e)
			}
			if len(opt.Etcd) > 0 && (opt.EtcdInitialCluster != "" || cmd.Flags().Changed("etcd-peer") || cmd.Flags().Changed("etcd-client") || opt.EtcdName != "") {
				return usageError{errors.New("--etcd (an external cluster) excludes --etcd-name, --etcd-peer, --etcd-client and --etcd-initial-cluster (the embedded member)")}
			}
			if len(opt.Etcd) == 0 && (opt.EtcdCA != "" || opt.EtcdCert != "" || opt.EtcdKey != "" || opt.EtcdUser != "" || etcdPasswordFile != "") {
				return usageError{errors.New("--etcd-ca, --etcd-cert, --etcd-key, --etcd-user and --etcd-password-file are for an external cluster (--etcd); the embedded member's TLS is the station's own")}
			}
			if (opt.EtcdCert == "") != (opt.EtcdKey == "") {
				return usageError{errors.New("--etcd-cert and --etcd-key go together")}
			}
			if (opt.EtcdUser == "") != (etcdPasswordFile == "") {
				return usageError{errors.New("--etcd-user and --etcd-password-file go together")}
			}
			if etcdPasswordFile != "" {
				pw, err := safefile.ReadSecret(etcdPasswordFile)
				if err != nil {
					return fileError("--etcd-password-file", etcdPasswordFile, err)
				}
				opt.EtcdPassword = strings.TrimRight(string(pw), "\r\n")
				if opt.EtcdPassword == "" {
					return fmt.Errorf("--etcd-password-file %s: empty", etcdPasswordFile)
				}
			}
			if (opt.TLSCert == "") != (opt.TLSKey == "") {
				return usageError{errors.New("--tls-cert and --tls-key go together")}
			}
			opt.Meta = splitList(metaList)
			if secretFile != "" {
				cred, err := proto.LoadCredential(secretFile)
				if err != nil {
					var pe *fs.PathError
					if errors.As(err, &pe) {
						return fileError("--secret-file", secretFile, err)
					}
					return err
				}
				if cred.Kind() != proto.KindFull {
					return fmt.Errorf("--secret-file %s: a read-only credential; the station needs the cluster secret (meta's DATA/%s)", secretFile, proto.SecretFileName)
				}
				if opt.Secret, err = os.ReadFile(secretFile); err != nil {
					return err
				}
			}
			if err := os.MkdirAll(opt.Data, 0o700); err != nil {
				return fileError("--data", opt.Data, err)
			}
			// The station tags its own records with role=mgmt.
			opt.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			ctx, stop := signalContext()
			defer stop()
			// NewContext: Ctrl-C also ends the wait for etcd and the
			// other stations.
			st, err := mgmt.NewContext(ctx, opt)
			if err != nil {
				return err
			}
			defer st.Close()
			ca := opt.TLSCA
			if ca == "" && opt.TLSCert == "" {
				ca = filepath.Join(opt.Data, "tls", "ca.pem")
			}
			err = st.Run(ctx, func(addr string) {
				addr = strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://")
				ready("mgmt", addr)
				scheme := "https"
				if opt.Insecure {
					scheme = "http"
				}
				caNote := "CA " + ca
				if ca == "" {
					caNote = "CA: the system's"
				}
				fmt.Printf("station listening on %s://%s (%s, admin token %s)\n", scheme, addr, caNote, filepath.Join(opt.Data, "admin.token"))
			})
			if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
				return nil // stopped by a signal: a clean stop
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&opt.Data, "data", defaultMgmtData, "the station's directory (etcd data, TLS, admin token, binaries)")
	f.StringVar(&opt.Listen, "listen", "127.0.0.1:7600", "API address (HTTPS)")
	f.StringVar(&etcd, "etcd", "", "an external etcd cluster's client endpoints, comma-separated (default: an embedded member in DATA/etcd)")
	f.StringVar(&opt.EtcdName, "etcd-name", "", "the embedded etcd member's name (default station)")
	f.StringVar(&opt.EtcdPeer, "etcd-peer", "127.0.0.1:7602", "the embedded member's peer address")
	f.StringVar(&opt.EtcdClient, "etcd-client", "127.0.0.1:7601", "the embedded member's client address (TLS 1.3 with client certificates from the station's CA and etcd auth, loopback included; directors of an HA group elect through it)")
	f.StringVar(&opt.EtcdInitialCluster, "etcd-initial-cluster", "", "every station's member as NAME=https://PEER,... (several stations, one etcd cluster; make their CA first with 'corral mgmt init-ca')")
	f.StringVar(&opt.EtcdCA, "etcd-ca", "", "with --etcd: the CA (PEM) the external cluster's server certificates are checked against")
	f.StringVar(&opt.EtcdCert, "etcd-cert", "", "with --etcd: this station's client certificate (PEM)")
	f.StringVar(&opt.EtcdKey, "etcd-key", "", "with --etcd: the key of --etcd-cert (mode 0600 or stricter)")
	f.StringVar(&opt.EtcdUser, "etcd-user", "", "with --etcd: the etcd user, when the cluster has auth on (with --etcd-password-file)")
	f.StringVar(&etcdPasswordFile, "etcd-password-file", "", "with --etcd-user: a file holding its password (mode 0600 or stricter)")
	f.StringVar(&opt.TLSCert, "tls-cert", "", "the API's certificate, PEM (default: one signed by the CA the station makes)")
	f.StringVar(&opt.TLSKey, "tls-key", "", "private key of --tls-cert")
	f.StringVar(&opt.TLSCA, "tls-ca", "", "CA certificate of --tls-cert (handed to members that join)")
	f.StringVar(&secretFile, "secret-file", os.Getenv(proto.SecretEnv), "the file system's cluster secret, for members that join and webmasters' uploads (env "+proto.SecretEnv+"; none: those parts are off)")
	f.StringVar(&metaList, "meta", "", "metadata members, comma-separated (default: the configuration's filesystem.meta)")
	c.AddCommand(tokenCmd(), userCmd(), loginCmd(), backupCmd(), restoreCmd(), rolloutCmd(), uploadCmd(), initCACmd())
	return c
}

// initCACmd is `corral mgmt init-ca DIR...`: one CA for stations that
// will form one etcd cluster.
func initCACmd() *cobra.Command {
	return &cobra.Command{
		Use:   "init-ca DATA-DIR...",
		Short: "Make one CA in each station data directory, before stations that form one etcd cluster first start",
		Long: `Stations that form one etcd cluster (--etcd-initial-cluster) trust each
other's etcd peer certificates through one CA, so they must have it before
they first start. init-ca makes it and writes DATA/tls/ca.pem and ca.key
(0600, in a 0700 directory) into each data directory given; copy a
directory's tls/ca.pem and tls/ca.key to a station on another host. A
directory that already has a CA is refused.`,
		Example: `  corral mgmt init-ca /var/lib/corral/s1 /var/lib/corral/s2 /var/lib/corral/s3`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := mgmt.InitCA(args...); err != nil {
				return err
			}
			for _, d := range args {
				fmt.Println(filepath.Join(d, "tls", "ca.pem"))
			}
			return nil
		},
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

var memberRoles = []string{api.RoleNode, api.RoleDirector, api.RoleMeta, api.RoleIOD}
var userRoles = []string{api.RoleAdmin, api.RoleWebmaster, api.RoleReadOnly}

func tokenCmd() *cobra.Command {
	var sf stationFlags
	c := &cobra.Command{
		Use:   "token COMMAND",
		Short: "Join tokens: make, list and revoke them",
		Long: `Join tokens let a new or replaced machine join the cluster: 'corral node
--join STATION --token T' (likewise director, meta, iod) trades one for its
configuration and credentials. A token is for one role, expires after --ttl,
is good for one join unless made with --multi-use, and can be revoked.

The token string is ID.SECRET.CAHASH: CAHASH pins the station's CA, so a
member needs no CA file to trust the station. Only 'token create' shows it.`,
		Example: `  T=$(corral mgmt token create --role node --ttl 1h)
  corral mgmt token list
  corral mgmt token revoke 3f2a9c`,
	}
	sf.add(c.PersistentFlags())

	var role string
	var ttl time.Duration
	var single, multi bool
	var cluster string
	create := &cobra.Command{
		Use:   "create --role node|director|meta|iod [--ttl 1h] [--multi-use] [--cluster NAME]",
		Short: "Make a join token: the token on standard output, what it is on standard error",
		Example: `  T=$(corral mgmt token create --role node --ttl 1h)
  corral mgmt token create --role node --cluster web   # a new node enters cluster web's pools by itself
  corral mgmt token create --role iod --ttl 30m --multi-use   # several iods join with it until it expires`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(memberRoles, role) {
				return usageError{fmt.Errorf("--role %q: want one of %s", role, strings.Join(memberRoles, ", "))}
			}
			if ttl <= 0 {
				return usageError{fmt.Errorf("--ttl %s: want a positive duration such as 1h", ttl)}
			}
			if single && multi {
				return usageError{errors.New("--single-use and --multi-use exclude each other (single-use is the default)")}
			}
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			var tok api.Token
			if err := cl.Do(ctx, http.MethodPost, api.RouteTokens, api.TokenRequest{Role: role, TTL: ttl, MultiUse: multi, Cluster: cluster}, &tok); err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			s, err := joinTokenString(&sf, cl.Stations[0], tok)
			if err != nil {
				return err
			}
			fmt.Println(s)
			note := ", single-use"
			if !tok.SingleUse {
				note = ", multi-use"
			}
			if tok.Cluster != "" {
				note += ", a new node enters cluster " + tok.Cluster
			}
			fmt.Fprintf(os.Stderr, "join token %s for role %s, expires %s%s\n", tok.ID, tok.Role, tok.Expires.Local().Format(time.RFC3339), note)
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "the role that may join with it: node, director, meta or iod")
	create.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long it is valid")
	create.Flags().BoolVar(&multi, "multi-use", false, "valid for any number of joins until it expires (default: one join)")
	create.Flags().BoolVar(&single, "single-use", false, "valid for one join only (the default; kept for scripts)")
	create.Flags().StringVar(&cluster, "cluster", "", "node tokens: the logical cluster a node joining with it enters (a node not yet in the configuration is added at its address, as a new version)")

	var asJSON bool
	list := &cobra.Command{
		Use:     "list [--json]",
		Short:   "List tokens (never their secrets): role, who made it, expiry, state",
		Example: "  corral mgmt token list\n  corral mgmt token list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			var toks []api.Token
			if err := cl.Do(ctx, http.MethodGet, api.RouteTokens, nil, &toks); err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			if asJSON {
				return printJSONTo(os.Stdout, toks)
			}
			printTokens(os.Stdout, toks, time.Now())
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	revoke := &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke a token: it joins nothing more (members already joined keep their credential)",
		Example: "  corral mgmt token revoke 3f2a9c",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if i := strings.IndexByte(id, '.'); i > 0 {
				id = id[:i] // the whole token string was given
			}
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			if err := cl.Do(ctx, http.MethodDelete, api.RouteToken+url.PathEscape(id), nil, nil); err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			fmt.Fprintf(os.Stderr, "token %s revoked\n", id)
			return nil
		},
	}
	c.AddCommand(create, list, revoke)
	return c
}

// joinTokenString is what a member's --token takes: ID.SECRET.CAHASH. A
// station that already answers the whole string in Secret is taken as is.
func joinTokenString(sf *stationFlags, station string, tok api.Token) (string, error) {
	if strings.Count(tok.Secret, ".") == 2 {
		return tok.Secret, nil
	}
	if tok.ID == "" || tok.Secret == "" {
		return "", errors.New("station: the token's answer has no ID or secret")
	}
	der, err := stationCADER(sf, station)
	if err != nil {
		return "", err
	}
	return tok.ID + "." + tok.Secret + "." + caHash(der), nil
}

func tokenState(t api.Token, now time.Time) string {
	switch {
	case t.Revoked:
		return "revoked"
	case t.SingleUse && t.Used:
		return "used"
	case !t.Expires.IsZero() && now.After(t.Expires):
		return "expired"
	}
	return "valid"
}

func printTokens(w io.Writer, toks []api.Token, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tUSER\tCREATED BY\tEXPIRES\tUSE\tSTATE")
	for _, t := range toks {
		use := "many"
		if t.SingleUse {
			use = "once"
		}
		user := t.User
		if user == "" {
			user = "-"
		}
		exp := "never"
		if !t.Expires.IsZero() {
			exp = t.Expires.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Role, user, t.CreatedBy, exp, use, tokenState(t, now))
	}
	tw.Flush()
}

func userCmd() *cobra.Command {
	var sf stationFlags
	c := &cobra.Command{
		Use:   "user COMMAND",
		Short: "Accounts: admins, webmasters of domains, read-only users",
		Long: `Accounts of the station's API. An admin may do anything; a webmaster uploads
into their domains' directories only; a read-only user looks. Passwords are
read from --password-file or standard input (its first line), and kept
hashed by the station. Users get an API token with 'corral mgmt login'.

The station takes a user's role and domains from the configuration's
accounts: section: list the user there first ('corral cfg apply'), then set
the password here.`,
		Example: `  echo 's3cret-pass' | corral mgmt user add alice --role webmaster --domain www.example.com
  corral mgmt user add bob --role admin --password-file bob.pw
  corral mgmt user list
  corral mgmt user rm alice`,
	}
	sf.add(c.PersistentFlags())

	var role, pwFile string
	var domains []string
	add := &cobra.Command{
		Use:   "add NAME --role admin|webmaster|read-only [--domain D]... [--password-file F]",
		Short: "Create or replace a user (password from --password-file or standard input)",
		Example: `  echo 's3cret-pass' | corral mgmt user add alice --role webmaster --domain www.example.com --domain shop.example.com
  corral mgmt user add ops --role read-only --password-file ops.pw`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(userRoles, role) {
				return usageError{fmt.Errorf("--role %q: want one of %s", role, strings.Join(userRoles, ", "))}
			}
			if role == api.RoleWebmaster && len(domains) == 0 {
				return usageError{errors.New("--role webmaster needs at least one --domain (the domains they may upload to)")}
			}
			if role != api.RoleWebmaster && len(domains) > 0 {
				return usageError{fmt.Errorf("--domain goes with --role webmaster only (an %s may do more)", role)}
			}
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			pw, err := readPassword(pwFile, "password for "+args[0]+": ")
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			req := api.UserRequest{User: api.User{Name: args[0], Role: role, Domains: domains}, Password: pw}
			if err := cl.Do(ctx, http.MethodPost, api.RouteUsers, req, nil); err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			fmt.Fprintf(os.Stderr, "user %s (%s) saved\n", args[0], role)
			return nil
		},
	}
	add.Flags().StringVar(&role, "role", "", "admin, webmaster or read-only")
	add.Flags().StringArrayVar(&domains, "domain", nil, "a domain a webmaster may upload to (repeat for several)")
	add.Flags().StringVar(&pwFile, "password-file", "", "file whose first line is the password (default: standard input)")

	var asJSON bool
	list := &cobra.Command{
		Use:     "list [--json]",
		Short:   "List users with their roles and domains",
		Example: "  corral mgmt user list",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			var users []api.User
			if err := cl.Do(ctx, http.MethodGet, api.RouteUsers, nil, &users); err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			if asJSON {
				return printJSONTo(os.Stdout, users)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tDOMAINS")
			for _, u := range users {
				d := strings.Join(u.Domains, ",")
				if d == "" {
					d = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", u.Name, u.Role, d)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	rm := &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove a user (their API tokens stop working)",
		Example: "  corral mgmt user rm alice",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			if err := cl.Do(ctx, http.MethodDelete, api.RouteUser+url.PathEscape(args[0]), nil, nil); err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			fmt.Fprintf(os.Stderr, "user %s removed\n", args[0])
			return nil
		},
	}
	c.AddCommand(add, list, rm)
	return c
}

func loginCmd() *cobra.Command {
	var sf stationFlags
	var user, pwFile, save string
	c := &cobra.Command{
		Use:   "login --user NAME [--password-file F] [--save FILE]",
		Short: "Trade a user's password for an API token, saved for the other commands",
		Long: `Trade a user's password for an API token and save it (mode 0600) in
$XDG_CONFIG_HOME/corral/token (~/.config/corral/token), or --save FILE,
and record the station's URL, its CA and the token's file in the client
configuration, $XDG_CONFIG_HOME/corral/client.yaml: the client commands
(corral cfg, corral mgmt ..., from any directory) use them when no flag or
CORRAL_* variable is given and there is no ./corral-data/mgmt.
The password is the first line of --password-file or standard input.`,
		Example: `  corral mgmt login --user alice
  corral mgmt login --user alice --password-file alice.pw --station https://10.0.0.5:7600`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return usageError{errors.New("--user is required: the account to log in as")}
			}
			if save == "" {
				p, err := loginTokenPath()
				if err != nil {
					return err
				}
				save = p
			}
			cl, err := sf.client(false)
			if err != nil {
				return err
			}
			cl.Token = "" // login goes without a bearer
			pw, err := readPassword(pwFile, "password for "+user+": ")
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			var rep api.LoginReply
			if err := cl.Do(ctx, http.MethodPost, api.RouteLogin, api.LoginRequest{User: user, Password: pw}, &rep); err != nil {
				var se *api.StatusError
				if errors.As(err, &se) && se.Status == http.StatusUnauthorized {
					return fmt.Errorf("login as %s refused: wrong user name or password", user)
				}
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			if err := os.MkdirAll(filepath.Dir(save), 0o700); err != nil {
				return err
			}
			if err := writeFileAtomic(save, []byte(rep.Token+"\n"), 0o600); err != nil {
				return err
			}
			// Recorded for every directory: the station, its CA and the
			// token (absolute paths), in the client configuration.
			abs := func(p string) string {
				if p == "" {
					return ""
				}
				return mustAbs(p)
			}
			cc, err := clientcfg.Update(func(c *clientcfg.Config) {
				c.Station, c.StationTokenFile = sf.station, abs(save)
				if ca := abs(sf.caPath()); ca != "" {
					c.StationCA = ca
				}
			})
			if err != nil {
				return fmt.Errorf("logged in, token saved in %s, but the client configuration was not written: %v", save, err)
			}
			fmt.Fprintf(os.Stderr, "logged in as %s until %s; token saved in %s; station, CA and token recorded in %s\n", user, rep.Expires.Local().Format(time.RFC3339), save, cc)
			return nil
		},
	}
	sf.add(c.Flags())
	c.Flags().StringVar(&user, "user", "", "the account's name")
	c.Flags().StringVar(&pwFile, "password-file", "", "file whose first line is the password (default: standard input)")
	c.Flags().StringVar(&save, "save", "", "where to keep the token (default $XDG_CONFIG_HOME/corral/token)")
	return c
}

// countWriter counts what passes and redraws a progress line.
type countWriter struct {
	w io.Writer
	n int64
	p *progress
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.p.set(c.n)
	return n, err
}

func backupCmd() *cobra.Command {
	var sf stationFlags
	c := &cobra.Command{
		Use:   "backup FILE",
		Short: "Save the station's state (etcd snapshot and configuration history) to FILE",
		Long: `Save everything the station keeps (an etcd snapshot with the configuration
history, accounts, tokens and members) to FILE, mode 0600: it holds secrets.
The file is written beside FILE, synced and renamed once complete (and the
directory synced), so FILE is never half a backup. Restore it into a fresh station with 'corral mgmt restore'.`,
		Example: `  corral mgmt backup station.bak`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			if fi, err := os.Stat(file); err == nil && fi.IsDir() {
				return usageError{fmt.Errorf("%s is a directory: give the backup file's name (%s)", file, filepath.Join(file, "station.bak"))}
			}
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			// A large backup may take long: no timeout, only signals.
			ctx, stop := signalContext()
			defer stop()
			// Through safefile: FILE is the old one or the whole new one,
			// synced with its directory, even after a power cut.
			f, err := safefile.Create(file, 0o600)
			if err != nil {
				return err
			}
			defer f.Abort()
			cw := &countWriter{w: f, p: newProgressTo(os.Stderr, isTTYFile(os.Stderr), "backup", -1, time.Now)}
			err = cl.DoRaw(ctx, http.MethodGet, api.RouteBackup, "", nil, cw)
			cw.p.done()
			if err == nil && cw.n == 0 {
				err = errors.New("station: the backup is empty")
			}
			if err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			if err := f.Commit(); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "backup: %d bytes (%s) written to %s\n", cw.n, human(cw.n), file)
			return nil
		},
	}
	sf.add(c.Flags())
	return c
}

func restoreCmd() *cobra.Command {
	var data string
	c := &cobra.Command{
		Use:   "restore FILE --data DIR",
		Short: "Restore a backup into a fresh station directory (offline; then start the station on it)",
		Long: `Restore a file made by 'corral mgmt backup' into DIR, a new station
directory, without a running station. Then start 'corral mgmt --data DIR':
members reconnect to it with their credentials as before.`,
		Example: `  corral mgmt restore station-2026-11-25.bak --data /var/lib/corral/mgmt-new
  corral mgmt --data /var/lib/corral/mgmt-new`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return usageError{errors.New("--data is required: the new station's directory")}
			}
			if fi, err := os.Stat(args[0]); err != nil {
				return fileError("backup file", args[0], err)
			} else if fi.IsDir() {
				return usageError{fmt.Errorf("backup file %s is a directory: give the file 'corral mgmt backup' wrote", args[0])}
			}
			if fi, err := os.Stat(data); err == nil && !fi.IsDir() {
				return usageError{fmt.Errorf("--data %s is a file: give a new (or empty) directory", data)}
			}
			if err := mgmt.Restore(args[0], data); err != nil {
				// %v: the root's printing would cut a wrapped path error
				// down to its path, dropping which restore and where.
				return fmt.Errorf("restore %s into %s: %v", args[0], data, strings.TrimPrefix(err.Error(), "restore: "))
			}
			fmt.Printf("restored %s into %s; start the station with:\n  corral mgmt --data %s\n", args[0], data, data)
			return nil
		},
	}
	c.Flags().StringVar(&data, "data", "", "the new station's directory (empty or absent)")
	return c
}
