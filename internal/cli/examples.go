package cli

import "github.com/spf13/cobra"

// fallbackExamples are the --help examples of commands whose files other
// work owns; a command that sets its own Example keeps it.
var fallbackExamples = map[string]string{
	"corral up": `  corral up                                   # 3 I/O servers, 3 nodes, an l4 director
  corral up --dataplane l7 --scheduler mwlc
  corral up --data /srv/corral --nodes 5 --iods 4
  sudo corral up --testbed --rate 100mbit`,
	"corral ctl services": `  corral ctl services
  corral ctl --admin 127.0.0.1:7500 services`,
	"corral ctl drain":  `  corral ctl drain www 127.0.0.21:8080`,
	"corral ctl weight": `  corral ctl weight www 127.0.0.22:8080 3`,
	"corral ctl enable": `  corral ctl enable www 127.0.0.21:8080`,
}

// addExamples fills in fallbackExamples below c.
func addExamples(c *cobra.Command) {
	if e, ok := fallbackExamples[c.CommandPath()]; ok && c.Example == "" {
		c.Example = e
	}
	for _, sub := range c.Commands() {
		addExamples(sub)
	}
}
