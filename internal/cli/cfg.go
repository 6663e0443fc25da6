package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/spf13/cobra"
)

// cfgCmd is `corral cfg`: the cluster configuration at the station.
func cfgCmd() *cobra.Command {
	var sf stationFlags
	c := &cobra.Command{
		Use:   "cfg COMMAND",
		Short: "The cluster configuration: get, apply, diff, history, rollback, import, validate",
		Long: `Read and change the one cluster configuration the station keeps (YAML,
every field in docs/config.md). Every change makes a new version; members
apply it live and report the version they run ('corral cfg status').

The usual loop: 'corral cfg get -o cluster.yaml', edit, 'corral cfg apply
cluster.yaml'. get writes "# version N" on the first line; apply takes it as
the version you edited, and the station refuses the apply if another change
came in since (exit status 3): get again, merge, apply again.

Exit status: 0 done, 1 failed (a configuration error prints one line per
problem: FILE:LINE: PATH: message), 2 usage, 3 the configuration changed
since the version you edited.`,
		Example: `  corral cfg get -o cluster.yaml
  corral cfg apply cluster.yaml --comment add-web4
  corral cfg diff cluster.yaml
  corral cfg history
  corral cfg rollback 12
  corral cfg import /etc/corral/director.conf -o cluster.yaml
  corral cfg validate cluster.yaml`,
	}
	sf.add(c.PersistentFlags())
	call := func(cmd *cobra.Command, file string, base int64, method, route string, in, out any) error {
		cl, err := sf.client(true)
		if err != nil {
			return err
		}
		ctx, cancel := mgmtCtx()
		defer cancel()
		if err := cl.Do(ctx, method, route, in, out); err != nil {
			return stationError(cmd.CommandPath(), file, base, err)
		}
		return nil
	}
	current := func(cmd *cobra.Command) (int64, error) {
		var vs []api.Version
		if err := call(cmd, "", 0, http.MethodGet, api.RouteHistory+"?limit=1", nil, &vs); err != nil {
			return 0, err
		}
		if len(vs) == 0 {
			return 0, nil
		}
		return vs[0].Version, nil
	}

	// get
	var getVersion int64
	var out string
	get := &cobra.Command{
		Use:   "get [--version N] [-o FILE]",
		Short: `Print the current configuration (or version N) as YAML, "# version N" first`,
		Example: `  corral cfg get
  corral cfg get -o cluster.yaml
  corral cfg get --version 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			route := api.RouteConfig
			if cmd.Flags().Changed("version") {
				if getVersion <= 0 {
					return usageError{fmt.Errorf("--version %d: want a version number > 0", getVersion)}
				}
				route = api.RouteVersion + strconv.FormatInt(getVersion, 10)
			}
			var v api.Version
			if err := call(cmd, "", 0, http.MethodGet, route, nil, &v); err != nil {
				return err
			}
			doc := withVersionHeader(v)
			if out == "" || out == "-" {
				_, err := os.Stdout.WriteString(doc)
				return err
			}
			if err := writeFileAtomic(out, []byte(doc), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "version %d written to %s\n", v.Version, out)
			return nil
		},
	}
	get.Flags().Int64Var(&getVersion, "version", 0, "an older version (default: the current one)")
	get.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of standard output")

	// apply
	var base int64
	var comment string
	var dryRun, force, allowEmpty bool
	apply := &cobra.Command{
		Use:   "apply FILE [--base N] [--comment C] [--dry-run] [--force] [--allow-empty]",
		Short: "Store FILE as the next version (prints the diff); refused (exit 3) if the configuration changed since",
		Long: `Validate FILE at the station and store it as the next version; members apply
it live. The diff from the current version is printed, then "applied:
version N".

The base version (the one you edited) is --base, else the "# version N"
comment 'corral cfg get' put on FILE's first line, else the current version
(read first; then nothing guards against a change made meanwhile). If the
current version is not the base, nothing is stored and the exit status is 3.
--force applies whatever the current version. FILE "-" is standard input.
A FILE with no configuration in it (empty, or comments only) is refused
(exit 2) unless --allow-empty: it would remove every service.`,
		Example: `  corral cfg apply cluster.yaml
  corral cfg apply cluster.yaml --dry-run
  corral cfg apply cluster.yaml --base 12
  corral cfg get | sed 's/weight: 1/weight: 2/' | corral cfg apply -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			if force && cmd.Flags().Changed("base") {
				return usageError{errors.New("--force and --base exclude each other")}
			}
			doc, err := readDoc(file)
			if err != nil {
				return err
			}
			if err := sendable(cmd.CommandPath(), file, doc); err != nil {
				return err
			}
			if !allowEmpty && emptyConfig(doc) {
				// A failed 'cfg get > FILE' leaves an empty FILE: applying it
				// would take every service off every director.
				return usageError{fmt.Errorf("%s holds no configuration: applying it would remove every service, node and director; give --allow-empty if that is what you want", docName(file))}
			}
			b := base
			switch {
			case force:
				b = -1
			case cmd.Flags().Changed("base"):
				if b < 0 {
					return usageError{fmt.Errorf("--base %d: want a version number (0: no configuration yet)", b)}
				}
			default:
				if hv, ok := versionHeader(doc); ok {
					b = hv
				} else {
					if b, err = current(cmd); err != nil {
						return err
					}
					fmt.Fprintf(os.Stderr, "%s has no \"# version N\" line: applying on the current version %d\n", docName(file), b)
				}
			}
			var rep api.ApplyReply
			req := api.ApplyRequest{Base: b, YAML: string(doc), Comment: comment, DryRun: dryRun}
			if err := call(cmd, file, b, http.MethodPut, api.RouteConfig, req, &rep); err != nil {
				return err
			}
			printDiff(os.Stdout, rep.Diff, isTTYFile(os.Stdout))
			switch {
			case rep.Unchanged:
				fmt.Printf("unchanged: version %d\n", rep.Version)
			case dryRun:
				fmt.Printf("dry run: nothing stored (current version %d)\n", rep.Version)
			default:
				fmt.Printf("applied: version %d\n", rep.Version)
			}
			return nil
		},
	}
	apply.Flags().Int64Var(&base, "base", 0, `the version FILE was edited from (default: its "# version N" line, else the current one)`)
	apply.Flags().StringVar(&comment, "comment", "", "why: kept in the history")
	apply.Flags().BoolVar(&dryRun, "dry-run", false, "validate and print the diff, store nothing")
	apply.Flags().BoolVar(&force, "force", false, "apply whatever the current version (no stale-version check)")
	apply.Flags().BoolVar(&allowEmpty, "allow-empty", false, "apply a file that holds no configuration (removes everything)")

	// diff
	diff := &cobra.Command{
		Use:   "diff FILE | diff A B | diff N",
		Short: "Diff FILE against the current configuration, or two versions, or version N against the current one",
		Example: `  corral cfg diff cluster.yaml
  corral cfg diff 11 12
  corral cfg diff 11`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rep api.ApplyReply
			if len(args) == 1 && !isVersionArg(args[0]) {
				doc, err := readDoc(args[0])
				if err != nil {
					return err
				}
				if err := sendable(cmd.CommandPath(), args[0], doc); err != nil {
					return err
				}
				if err := call(cmd, args[0], 0, http.MethodPost, api.RouteDiff, api.ApplyRequest{Base: -1, YAML: string(doc)}, &rep); err != nil {
					return err
				}
				if hv, ok := versionHeader(doc); ok && hv != rep.Version && rep.Diff != "" {
					fmt.Fprintf(os.Stderr, "%s was edited from version %d, the current is %d: the diff undoes the changes made since, and apply would be refused (exit 3)\n", docName(args[0]), hv, rep.Version)
				}
			} else {
				from, err := parseVersionArg(args[0])
				if err != nil {
					return err
				}
				var to int64
				if len(args) == 2 {
					if to, err = parseVersionArg(args[1]); err != nil {
						return err
					}
				} else if to, err = current(cmd); err != nil {
					return err
				}
				q := url.Values{"from": {strconv.FormatInt(from, 10)}, "to": {strconv.FormatInt(to, 10)}}
				if err := call(cmd, "", 0, http.MethodGet, api.RouteDiff+"?"+q.Encode(), nil, &rep); err != nil {
					return err
				}
			}
			if rep.Diff == "" {
				fmt.Fprintln(os.Stderr, "no difference")
				return nil
			}
			printDiff(os.Stdout, rep.Diff, isTTYFile(os.Stdout))
			return nil
		},
	}

	// history
	var limit int
	var asJSON bool
	history := &cobra.Command{
		Use:     "history [--limit N] [--json]",
		Short:   "The versions, newest first: VERSION TIME AUTHOR COMMENT",
		Example: "  corral cfg history\n  corral cfg history --limit 5 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usageError{fmt.Errorf("--limit %d: want a count > 0", limit)}
			}
			var vs []api.Version
			if err := call(cmd, "", 0, http.MethodGet, api.RouteHistory+"?limit="+strconv.Itoa(limit), nil, &vs); err != nil {
				return err
			}
			if asJSON {
				return printJSONTo(os.Stdout, vs)
			}
			printHistory(os.Stdout, vs)
			return nil
		},
	}
	history.Flags().IntVar(&limit, "limit", 20, "how many versions")
	history.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	// rollback
	var rbComment string
	rollback := &cobra.Command{
		Use:   "rollback N [--comment C]",
		Short: "Make a new version whose content is version N's (prints the diff)",
		Example: `  corral cfg rollback 12
  corral cfg rollback 12 --comment web4-misbehaves`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			to, err := parseVersionArg(args[0])
			if err != nil {
				return err
			}
			cur, err := current(cmd)
			if err != nil {
				return err
			}
			var rep api.ApplyReply
			if err := call(cmd, "", cur, http.MethodPost, api.RouteRollback, api.RollbackRequest{To: to, Base: cur, Comment: rbComment}, &rep); err != nil {
				return err
			}
			printDiff(os.Stdout, rep.Diff, isTTYFile(os.Stdout))
			if rep.Unchanged {
				fmt.Printf("unchanged: version %d is already version %d's content\n", rep.Version, to)
				return nil
			}
			fmt.Printf("applied: version %d (the content of version %d)\n", rep.Version, to)
			return nil
		},
	}
	rollback.Flags().StringVar(&rbComment, "comment", "", "why: kept in the history")

	// import
	var impOut, impComment string
	var impApply, impReplace bool
	imp := &cobra.Command{
		Use:   "import DIRECTOR.CONF [-o FILE] [--apply [--replace]]",
		Short: "Turn a director's configuration file into the cluster configuration (YAML); --apply sends it",
		Long: `Read a director's configuration file (docs/director.md) and print the cluster
configuration that says the same (services, real servers, weights, checks).
Runs locally; --apply then stores it at the station as the next version,
on a station with no configuration yet: the import is a whole configuration
and would replace everything else (nodes, domains, accounts) unless that is
what --replace says you want.`,
		Example: `  corral cfg import /etc/corral/director.conf -o cluster.yaml
  corral cfg import corral-data/director.conf --apply`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if impReplace && !impApply {
				return usageError{errors.New("--replace goes with --apply")}
			}
			src, err := os.ReadFile(args[0])
			if err != nil {
				return fileError("director configuration", args[0], err)
			}
			if line, ok := binaryLine(src); ok {
				// The director's parser would echo every line of it.
				return fmt.Errorf("%s:%d: not a text file: a director's configuration (docs/director.md) is text", args[0], line)
			}
			d, err := config.Parse(args[0], src)
			if err != nil {
				return err
			}
			cc, err := clustercfg.Import(d)
			if err != nil {
				return fmt.Errorf("import %s: %w", args[0], err)
			}
			y, err := cc.Marshal()
			if err != nil {
				return err
			}
			// The director's file takes what the cluster configuration does
			// not (service names such as "www:80"): say so here, naming the
			// output's lines, rather than at the next apply.
			outName := impOut
			switch {
			case impApply:
				outName = "(imported from " + args[0] + ")"
			case impOut == "" || impOut == "-":
				outName = "<stdout>"
			}
			_, verr := clustercfg.Parse(outName, y)
			if verr != nil && impApply {
				fmt.Fprintf(os.Stderr, "%s: %s does not make a valid cluster configuration; nothing sent (import it with -o FILE, edit, apply):\n", cmd.CommandPath(), args[0])
				return validationError(os.Stderr, cmd.CommandPath(), verr)
			}
			if impApply {
				var v api.Version
				if err := call(cmd, "", 0, http.MethodGet, api.RouteConfig, nil, &v); err != nil {
					return err
				}
				cur := v.Version
				if !impReplace && cur > 0 && !emptyConfig([]byte(v.YAML)) {
					// The import is a whole configuration: nodes, domains,
					// accounts and all else would go.
					return fmt.Errorf("the station already holds a configuration (version %d): --apply would replace all of it with %s's services; import with -o FILE, merge it into 'corral cfg get', apply that; or give --replace", cur, args[0])
				}
				if impComment == "" {
					impComment = "import " + args[0]
				}
				var rep api.ApplyReply
				// The errors' lines are the generated YAML's, not FILE's.
				if err := call(cmd, "", cur, http.MethodPut, api.RouteConfig, api.ApplyRequest{Base: cur, YAML: string(y), Comment: impComment}, &rep); err != nil {
					return err
				}
				printDiff(os.Stdout, rep.Diff, isTTYFile(os.Stdout))
				fmt.Printf("applied: version %d\n", rep.Version)
				return nil
			}
			if impOut == "" || impOut == "-" {
				if _, err := os.Stdout.Write(y); err != nil {
					return err
				}
			} else {
				if err := writeFileAtomic(impOut, y, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "%s imported into %s\n", args[0], impOut)
			}
			if verr != nil {
				fmt.Fprintf(os.Stderr, "%s: the result is not a valid cluster configuration yet: edit %s, then 'corral cfg validate' it:\n", cmd.CommandPath(), outName)
				return validationError(os.Stderr, cmd.CommandPath(), verr)
			}
			return nil
		},
	}
	imp.Flags().StringVarP(&impOut, "output", "o", "", "write to FILE instead of standard output")
	imp.Flags().BoolVar(&impApply, "apply", false, "store it at the station as the next version (only on a station with no configuration yet, unless --replace)")
	imp.Flags().BoolVar(&impReplace, "replace", false, "with --apply: replace the station's whole configuration with the import")
	imp.Flags().StringVar(&impComment, "comment", "", "with --apply: why (default: import FILE)")

	// validate
	validate := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check FILE locally (no station): every error as FILE:LINE: PATH: message, exit 1",
		Example: `  corral cfg validate cluster.yaml
  cat cluster.yaml | corral cfg validate -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := readDoc(args[0])
			if err != nil {
				return err
			}
			name := docName(args[0])
			if _, err := clustercfg.Parse(name, doc); err != nil {
				return validationError(os.Stderr, cmd.CommandPath(), err)
			}
			fmt.Printf("%s: valid\n", name)
			return nil
		},
	}

	// schema
	schema := &cobra.Command{
		Use:     "schema",
		Short:   "Print the configuration's JSON Schema (for editors and linters)",
		Example: "  corral cfg schema > cluster.schema.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := clustercfg.Schema()
			if len(s) == 0 {
				return errors.New("no schema in this build")
			}
			os.Stdout.Write(s)
			if s[len(s)-1] != '\n' {
				fmt.Println()
			}
			return nil
		},
	}

	// tx
	var txBase int64
	var txComment string
	tx := &cobra.Command{
		Use:   "tx OPS.json [--base N] [--comment C]",
		Short: "Several changes (put or delete items) as one version, from a JSON list of operations",
		Long: `Apply several changes as one version: OPS.json is a JSON list of operations,
each {"op": "put", "kind": K, "value": ITEM} (add, or replace by name) or
{"op": "delete", "kind": K, "name": NAME}; K is cluster, node, director,
service, domain, qos, layout (named by its path), account or feedback (the
one section that is not a list: put whole, deleted by the name "feedback");
ITEM has the YAML field names; a misspelt field is an error. The base is --base, else the
current version (read first); a stale base exits 3. "-" reads standard input.
The station's errors about the result print as PATH: message (exit 1): they
are not lines of OPS.json.`,
		Example: `  corral cfg tx ops.json --comment swap-web1
  echo '[{"op":"delete","kind":"node","name":"web1"}]' | corral cfg tx -
  echo '[{"op":"put","kind":"feedback","value":{"source":"agent","interval":"1s"}}]' | corral cfg tx -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := readDoc(args[0])
			if err != nil {
				return err
			}
			ops, err := parseTxOps(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", docName(args[0]), err)
			}
			b := txBase
			if !cmd.Flags().Changed("base") {
				if b, err = current(cmd); err != nil {
					return err
				}
			} else if b < 0 {
				return usageError{fmt.Errorf("--base %d: want a version number", b)}
			}
			var rep api.ApplyReply
			// The errors are the resulting configuration's, not OPS.json's lines.
			if err := call(cmd, "", b, http.MethodPost, api.RouteTx, api.TxRequest{Base: b, Comment: txComment, Ops: ops}, &rep); err != nil {
				return err
			}
			printDiff(os.Stdout, rep.Diff, isTTYFile(os.Stdout))
			if rep.Unchanged {
				fmt.Printf("unchanged: version %d\n", rep.Version)
				return nil
			}
			fmt.Printf("applied: version %d\n", rep.Version)
			return nil
		},
	}
	tx.Flags().Int64Var(&txBase, "base", 0, "the version the changes are meant for (default: the current one)")
	tx.Flags().StringVar(&txComment, "comment", "", "why: kept in the history")

	c.AddCommand(get, apply, diff, history, rollback, tx, imp, validate, schema, cfgStatusCmd(&sf), cfgFeedbackCmd(&sf))
	return c
}

// validationError prints local configuration errors one per line (exit
// 1); other errors pass.
func validationError(w io.Writer, cmdPath string, err error) error {
	var es clustercfg.Errors
	var e *clustercfg.Error
	switch {
	case errors.As(err, &es):
		for _, e := range es {
			fmt.Fprintln(w, e.Error())
		}
		fmt.Fprintf(w, "%s: %d error(s)\n", cmdPath, len(es))
		return exitError{1}
	case errors.As(err, &e):
		fmt.Fprintln(w, e.Error())
		return exitError{1}
	}
	return err
}

// binaryLine is the line of the first byte no text file has (NUL, a
// control character other than tab, CR, LF, FF, or invalid UTF-8).
func binaryLine(b []byte) (int, bool) {
	line := 1
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1, r < 0x20 && r != '\t' && r != '\r' && r != '\n' && r != '\f', r == 0x7f:
			return line, true
		case r == '\n':
			line++
		}
		i += n
	}
	return 0, false
}

// emptyConfig says whether doc is a valid configuration with nothing in
// it (only comments, "{}", or nothing at all).
func emptyConfig(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		switch l = strings.TrimSpace(l); {
		case l == "", l == "---", l == "...", l == "{}", l == "~", l == "null", strings.HasPrefix(l, "#"):
		default:
			if len(doc) > 1<<16 {
				return false // content; no need to parse a large file twice
			}
		}
	}
	c, err := clustercfg.Parse("", doc)
	if err != nil {
		return false // the station will say what is wrong
	}
	y, err := c.Marshal()
	return err == nil && strings.TrimSpace(string(y)) == "{}"
}

// docName is FILE as messages name it: "-" is <stdin>.
func docName(file string) string {
	if file == "-" {
		return "<stdin>"
	}
	return file
}

// readDoc reads a configuration file ("-": standard input), at most
// clustercfg.MaxDocument bytes.
func readDoc(file string) ([]byte, error) {
	var r io.Reader
	if file == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	const max = clustercfg.MaxDocument
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s: larger than %d MiB, the most a configuration may be", docName(file), max>>20)
	}
	return b, nil
}

// sendable refuses, as 'cfg validate' would (FILE:LINE: PATH: message,
// exit 1), a document that would not reach the station as written: bytes
// that are not UTF-8 become U+FFFD in the API's JSON, silently.
func sendable(cmdPath, file string, doc []byte) error {
	if utf8.Valid(doc) {
		return nil
	}
	file = docName(file)
	_, err := clustercfg.Parse(file, doc)
	if err == nil {
		err = fmt.Errorf("%s: not UTF-8 text", file)
	}
	return validationError(os.Stderr, cmdPath, err)
}

var versionHeaderRE = regexp.MustCompile(`^#\s*version\s+(\d+)\s*$`)

// versionHeader finds "# version N" among the comment lines at the top
// of doc: the version 'corral cfg get' wrote it from.
func versionHeader(doc []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "---" {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			return 0, false
		}
		if m := versionHeaderRE.FindStringSubmatch(line); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// withVersionHeader is v's YAML with "# version N" first.
func withVersionHeader(v api.Version) string {
	y := v.YAML
	if y != "" && !strings.HasSuffix(y, "\n") {
		y += "\n"
	}
	return fmt.Sprintf("# version %d\n%s", v.Version, y)
}

func isVersionArg(s string) bool {
	if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return false
	}
	_, err := os.Stat(s) // a file named 12 is a file
	return err != nil
}

func parseVersionArg(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, usageError{fmt.Errorf("version %q: want a number > 0", s)}
	}
	return n, nil
}

// printDiff prints a unified diff, coloured on a terminal.
func printDiff(w io.Writer, diff string, colour bool) {
	if diff == "" {
		return
	}
	if !colour {
		io.WriteString(w, diff)
		if !strings.HasSuffix(diff, "\n") {
			io.WriteString(w, "\n")
		}
		return
	}
	for _, l := range strings.SplitAfter(strings.TrimSuffix(diff, "\n"), "\n") {
		l = strings.TrimSuffix(l, "\n")
		c := ""
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			c = "\x1b[1m"
		case strings.HasPrefix(l, "+"):
			c = "\x1b[32m"
		case strings.HasPrefix(l, "-"):
			c = "\x1b[31m"
		case strings.HasPrefix(l, "@@"):
			c = "\x1b[36m"
		}
		if c == "" {
			fmt.Fprintln(w, l)
		} else {
			fmt.Fprintf(w, "%s%s\x1b[0m\n", c, l)
		}
	}
}

func printHistory(w io.Writer, vs []api.Version) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tTIME\tAUTHOR\tCOMMENT")
	for _, v := range vs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", v.Version, v.Time.Local().Format(time.RFC3339), v.Author, strings.ReplaceAll(v.Comment, "\n", " "))
	}
	tw.Flush()
}

// cfgStatusCmd is `corral cfg status`: each member's applied version.
func cfgStatusCmd(sf *stationFlags) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [--json]",
		Short: "Each member: NAME ROLE ADDR UP VERSION (applied/current) HEALTH ERROR",
		Long: `Each member that joined the station: its name, role and address, whether it
reported within the last seconds (UP), the configuration version it applied
against the current one, its health, and why it could not apply the last
version if so (it keeps running the one before).`,
		Example: "  corral cfg status\n  corral cfg status --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := sf.client(true)
			if err != nil {
				return err
			}
			ctx, cancel := mgmtCtx()
			defer cancel()
			ms, cur, err := fetchMembers(ctx, cl)
			if err != nil {
				return stationError(cmd.CommandPath(), "", 0, err)
			}
			if asJSON {
				return printJSONTo(os.Stdout, struct {
					Version int64              `json:"version"`
					Members []api.MemberStatus `json:"members"`
				}{cur, ms})
			}
			printStationMembers(os.Stdout, ms, cur)
			if len(ms) == 0 {
				fmt.Fprintln(os.Stderr, "no member has joined yet ('corral mgmt token create', then --join on each role)")
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: the current version and every member")
	return c
}

// fetchMembers gets every member's status and the current version.
func fetchMembers(ctx context.Context, cl *api.Client) ([]api.MemberStatus, int64, error) {
	var ms []api.MemberStatus
	if err := cl.Do(ctx, http.MethodGet, api.RouteMembers, nil, &ms); err != nil {
		return nil, 0, err
	}
	var vs []api.Version
	if err := cl.Do(ctx, http.MethodGet, api.RouteHistory+"?limit=1", nil, &vs); err != nil {
		return nil, 0, err
	}
	var cur int64
	if len(vs) > 0 {
		cur = vs[0].Version
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].Role != ms[j].Role {
			return ms[i].Role < ms[j].Role
		}
		return ms[i].Name < ms[j].Name
	})
	return ms, cur, nil
}

// printStationMembers is the members table of cfg status and ctl status.
func printStationMembers(w io.Writer, ms []api.MemberStatus, cur int64) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tADDR\tUP\tVERSION\tHEALTH\tERROR")
	for _, m := range ms {
		up := "no"
		if m.Up {
			up = "yes"
		}
		ver := fmt.Sprintf("%d/%d", m.Version, cur)
		if m.Version != cur {
			ver += " (behind)"
		}
		health := "ok"
		if !m.Healthy {
			health = "failing"
			if m.Health != "" {
				health += ": " + m.Health
			}
		}
		e := m.Error
		if e == "" {
			e = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Role, m.Addr, up, ver, oneLine(health), oneLine(e))
	}
	tw.Flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// appendStationMembers is the members part of `corral ctl status`: the
// station's members table when a station answers within a short while;
// nothing when none does (a director may run without one).
func appendStationMembers(w io.Writer, sf *stationFlags) {
	cl, err := sf.client(false)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ms, cur, err := fetchMembers(ctx, cl)
	var se *api.StatusError
	switch {
	case errors.As(err, &se):
		// A station answered but refused: say so, it is worth fixing.
		fmt.Fprintf(w, "\nstation %s: %s\n", cl.Stations[0], se.Body.Error)
		return
	case err != nil:
		return
	}
	fmt.Fprintf(w, "\nmembers (station %s, configuration version %d):\n", cl.Stations[0], cur)
	printStationMembers(w, ms, cur)
}

// parseTxOps reads a JSON list of transaction operations (or an object
// with "ops") and checks each names an op and kind it can be.
func parseTxOps(doc []byte) ([]api.TxOp, error) {
	var ops []api.TxOp
	d := bytes.TrimSpace(doc)
	// A misspelt field ("nmae", "vaule") is an error, not an empty one.
	dec := json.NewDecoder(bytes.NewReader(d))
	dec.DisallowUnknownFields()
	var err error
	if len(d) > 0 && d[0] == '{' {
		var req api.TxRequest // its base and comment: the flags' business
		err = dec.Decode(&req)
		ops = req.Ops
	} else {
		err = dec.Decode(&ops)
	}
	if err == nil && dec.More() {
		err = errors.New("more after the list")
	}
	if err != nil {
		return nil, fmt.Errorf("not a JSON list of operations (or {\"ops\": [...]}): %v", err)
	}
	txKinds := clustercfg.Kinds()
	if len(ops) == 0 {
		return nil, errors.New("no operations")
	}
	for i, op := range ops {
		switch {
		case op.Op != "put" && op.Op != "delete":
			return nil, fmt.Errorf("operation %d: op %q: want put or delete", i+1, op.Op)
		case !slices.Contains(txKinds, op.Kind):
			return nil, fmt.Errorf("operation %d: kind %q: want one of %s", i+1, op.Kind, strings.Join(txKinds, ", "))
		case op.Op == "put" && len(op.Value) == 0:
			return nil, fmt.Errorf("operation %d: put without a value", i+1)
		case op.Op == "delete" && op.Name == "":
			return nil, fmt.Errorf("operation %d: delete without a name", i+1)
		}
	}
	return ops, nil
}
