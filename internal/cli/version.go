package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version overrides the module version read from the build information:
// go build -ldflags "-X github.com/corral-cluster/corral/internal/cli.Version=$(git describe --tags --dirty)"
// (scripts/package does); 'corral version' and 'corral --version' print it.
var Version string

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, the source revision and the Go version",
		Args:    cobra.NoArgs,
		Example: `  corral version`,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), fullVersion())
			return nil
		},
	}
}

// fullVersion is versionText of this build.
func fullVersion() string {
	info, _ := debug.ReadBuildInfo()
	return versionText(info, Version)
}

// releaseVersion is the version alone: the tag scripts/package and
// scripts/test give with -ldflags -X (git describe), else the module
// version the build recorded.
func releaseVersion() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// versionText renders "corral VERSION (REVISION[+dirty], TIME) GO"; parts
// the build did not record are left out.
func versionText(info *debug.BuildInfo, override string) string {
	v, goVer := override, runtime.Version()
	var rev, at, dirty string
	if info != nil {
		if v == "" {
			v = info.Main.Version
		}
		goVer = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	s := "corral " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " (" + rev + dirty
		if at != "" {
			s += ", " + at
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s", s, goVer)
}
