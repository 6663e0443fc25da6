package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// manCmd writes a man page per command from the commands' own
// descriptions, examples and flags, so the pages cannot drift from them
// (the Debian package runs it at build time).
func manCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:     "man DIR",
		Short:   "Write a man page (section 1) for every command into DIR",
		Hidden:  true,
		Args:    cobra.ExactArgs(1),
		Example: "  corral man /tmp/man          # then: man -l /tmp/man/corral-fs-put.1",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			n := 0
			var walk func(c *cobra.Command) error
			walk = func(c *cobra.Command) error {
				if c.Hidden || c.Name() == "help" {
					return nil
				}
				name := strings.ReplaceAll(c.CommandPath(), " ", "-")
				if err := os.WriteFile(filepath.Join(args[0], name+".1"), manPage(c), 0o644); err != nil {
					return err
				}
				n++
				for _, s := range c.Commands() {
					if err := walk(s); err != nil {
						return err
					}
				}
				return nil
			}
			if err := walk(root); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d pages in %s\n", n, args[0])
			return nil
		},
	}
}

// manPage renders c as roff (man(7) macros).
func manPage(c *cobra.Command) []byte {
	var b bytes.Buffer
	name := strings.ReplaceAll(c.CommandPath(), " ", "-")
	fmt.Fprintf(&b, ".TH %s 1 \"\" \"corral %s\" \"Corral\"\n", strings.ToUpper(roff(name)), roff(releaseVersion()))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", roff(name), roff(c.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.B %s\n", roff(c.UseLine()))
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", paragraphs(desc))
	if subs := visibleCommands(c); len(subs) > 0 {
		b.WriteString(".SH COMMANDS\n")
		for _, s := range subs {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(s.Name()), roff(s.Short))
		}
	}
	flags := func(title string, fs *pflag.FlagSet) {
		first := true
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			if first {
				fmt.Fprintf(&b, ".SH %s\n", title)
				first = false
			}
			head := "\\-\\-" + roff(f.Name)
			if f.Shorthand != "" {
				head = "\\-" + roff(f.Shorthand) + ", " + head
			}
			if t := f.Value.Type(); t != "bool" {
				head += " " + roff(strings.ToUpper(t))
			}
			usage := f.Usage
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0" {
				usage += " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", head, roff(usage))
		})
	}
	flags("OPTIONS", c.NonInheritedFlags())
	flags("GLOBAL OPTIONS", c.InheritedFlags())
	if c.Example != "" {
		fmt.Fprintf(&b, ".SH EXAMPLES\n.nf\n%s\n.fi\n", roff(c.Example))
	}
	var see []string
	if c.HasParent() {
		see = append(see, strings.ReplaceAll(c.Parent().CommandPath(), " ", "-")+"(1)")
	}
	for _, s := range visibleCommands(c) {
		see = append(see, strings.ReplaceAll(s.CommandPath(), " ", "-")+"(1)")
	}
	if len(see) > 0 {
		fmt.Fprintf(&b, ".SH SEE ALSO\n%s\n", roff(strings.Join(see, ", ")))
	}
	return b.Bytes()
}

func visibleCommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		if !s.Hidden && s.Name() != "help" && s.IsAvailableCommand() {
			out = append(out, s)
		}
	}
	return out
}

// paragraphs keeps the text's blank-line paragraphs; other line breaks
// are refilled by the formatter.
func paragraphs(s string) string {
	parts := strings.Split(strings.TrimSpace(s), "\n\n")
	for i, p := range parts {
		parts[i] = roff(p)
	}
	return strings.Join(parts, "\n.PP\n")
}

// roff escapes backslashes and a leading dot or quote, which roff would
// read as a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\e")
	s = strings.ReplaceAll(s, "-", "\\-")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = "\\&" + l
		}
	}
	return strings.Join(lines, "\n")
}
