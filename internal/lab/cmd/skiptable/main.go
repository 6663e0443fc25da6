// Command skiptable reads `go test -json` on stdin, prints what plain `go
// test` would (package lines, failed tests' output), then a table of the
// tests that skipped with their reasons. With $CORRAL_CI=1 it exits 1 when
// a test skipped that the allow-list (-allow) does not name.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/corral-cluster/corral/internal/lab"
)

func main() {
	allowPath := flag.String("allow", ".ci/skip-allow.txt", "the allow-list: per line a test name and why it may skip in CI")
	flag.Parse()
	allow, err := lab.ReadAllow(*allowPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skiptable:", err)
		os.Exit(2)
	}
	skips, err := lab.Filter(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skiptable: reading go test -json:", err)
		os.Exit(2)
	}
	bad := lab.Mark(skips, allow)
	fmt.Println()
	lab.Table(os.Stdout, skips)
	if len(bad) > 0 && lab.CI() {
		fmt.Printf("%d tests skipped in CI that %s does not allow: make them run, or add them with a reason\n", len(bad), *allowPath)
		os.Exit(1)
	}
}
