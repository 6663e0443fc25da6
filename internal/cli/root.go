// Package cli wires the corral subcommands to the packages that do the work.
// One file per subcommand; no logic beyond flags, output and exit codes.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// exitError carries an exit status past cobra without another message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// errInterrupted: a signal (Ctrl-C) ended the command; said so, not as the
// "context canceled" of the calls it cut short.
var errInterrupted = errors.New("interrupted")

// usageError is a command line the user got wrong (unknown command or flag,
// bad flag value, wrong number of arguments): exit status 2, as getopt
// programs do.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// errVerbose is the root's --verbose: errors keep their internal detail
// (inode numbers) when it is set.
var errVerbose bool

// Main runs corral with args and returns the process exit status.
func Main(args []string) int {
	stopProfile := startProfile(args)
	defer stopProfile()
	root := newRoot()
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	who := "corral"
	if cmd != nil {
		who = cmd.CommandPath()
	}
	return exitStatus(who, err)
}

// exitStatus prints err after the command's path (unless it is an
// exitError, already reported) and picks the status from its type: 0 none,
// 2 usage, else 1.
func exitStatus(who string, err error) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, errInterrupted) {
		fmt.Fprintf(os.Stderr, "%s: interrupted\n", who)
		return 130 // as a shell reports SIGINT
	}
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(os.Stderr, "%s: %s\n", who, err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "%s: %s\n", who, errText(err))
	return 1
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "corral",
		Short: "Corral: a cluster of commodity Linux machines serving as one",
		Long: `Corral turns commodity Linux machines into one network service: a director
spreads connections for a virtual IP over cluster nodes, which serve content
from a parallel file system striped over I/O servers.

Start everything on this machine with 'corral up', then try 'corral fs' and
'corral mount'. Each role is a subcommand; see 'corral ROLE --help'.`,
		Example: `  corral up                      # meta, iods, nodes and a director on this machine
  corral fs ls -l /www           # the file system, like coreutils
  corral ctl services            # what the director does
  corral version`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// No -v shorthand: a subcommand defining its own -v would panic.
	root.PersistentFlags().BoolVar(&errVerbose, "verbose", false, "errors with internal detail (inode numbers)")
	root.AddCommand(metaCmd(), iodCmd(), fsCmd(), mountCmd(), directorCmd(), nodeCmd(), ctlCmd(), upCmd(), testbedCmd(), benchCmd(), fsxCmd(), versionCmd(),
		mgmtCmd(), cfgCmd())
	// 'corral --version' as well as 'corral version'; completion scripts
	// are for packages (corral completion bash|zsh), not the command list.
	root.Version = fullVersion()
	root.SetVersionTemplate("{{.Version}}\n")
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(manCmd(root))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w%s", err, flagSuggestion(c, err))}
	})
	root.SetHelpCommand(helpCmd(root))
	strictArgs(root)
	addExamples(root)
	return root
}

// helpCmd is 'corral help [COMMAND...]'; an unknown topic is a usage error
// (cobra's own prints the root's help and exits 0).
func helpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:     "help [COMMAND...]",
		Short:   "Help about any command",
		Example: "  corral help fs layout set",
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			if err == nil && len(rest) > 0 {
				near := ""
				if s := c.SuggestionsFor(rest[0]); len(s) > 0 {
					near = "; did you mean " + strings.Join(s, " or ") + "?"
				}
				err = fmt.Errorf("no help topic %q under %q%s", rest[0], c.CommandPath(), near)
			}
			if err != nil {
				return usageError{err}
			}
			return c.Help()
		},
	}
}

// strictArgs makes every argument error a usageError, and a command that
// only groups subcommands refuse an unknown one (cobra shows help and exits
// 0 for it) with the nearest names.
func strictArgs(c *cobra.Command) {
	c.SuggestionsMinimumDistance = 2
	for _, sub := range c.Commands() {
		strictArgs(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return usageError{errors.New(msg + " (see '" + cmd.CommandPath() + " --help')")}
		}
		return
	}
	if orig := c.Args; orig != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := orig(cmd, args); err != nil {
				return usageError{fmt.Errorf("%w (usage: %s)", err, cmd.UseLine())}
			}
			return nil
		}
	}
}

// flagSuggestion names the flags of c nearest to an unknown one.
func flagSuggestion(c *cobra.Command, err error) string {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedName() == "" {
		return ""
	}
	want := ne.GetSpecifiedName()
	var near []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && (editDistance(want, f.Name) <= 2 || strings.HasPrefix(f.Name, want)) {
			near = append(near, "--"+f.Name)
		}
	})
	if len(near) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(near, " or ") + "?"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// errText renders an error the way coreutils do: "PATH: reason". Inode
// numbers the servers put in their messages are internal: they show only
// with --verbose.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		var en syscall.Errno
		if errors.As(pe.Err, &en) && pe.Err == en {
			return pe.Path + ": " + en.Error()
		}
		return pe.Path + ": " + userTerms(pe.Err.Error())
	}
	return userTerms(err.Error())
}

var inodePrefix = regexp.MustCompile(`(^|: )inode [0-9]+: `)

func userTerms(msg string) string {
	if errVerbose {
		return msg
	}
	return inodePrefix.ReplaceAllString(msg, "$1")
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func daemonLog(role string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("role", role)
}

// ready announces a daemon's address on stdout; internal/launch waits for it.
func ready(role, addr string) { fmt.Printf("corral %s: listening on %s\n", role, addr) }

// parseSize reads a byte count with an optional binary unit: 4096, 64K,
// 1M, 2G, 64KiB.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want a number with an optional unit: 4096, 64K, 1M, 1G)", s)
	}
	return v * mult, nil
}

// human renders a byte count with a binary unit.
func human(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	i := -1
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d%ciB", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f%ciB", f, units[i])
}
