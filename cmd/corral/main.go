// Command corral is every role of a Corral cluster in one binary; see
// `corral --help` and docs/.
package main

import (
	"os"

	"github.com/corral-cluster/corral/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
