package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/spf13/cobra"
)

func upCmd() *cobra.Command {
	var data string
	var iods int
	c := &cobra.Command{
		Use:   "up [--data DIR] [--iods N]",
		Short: "Run a whole Corral on this machine (no root needed)",
		Long: `Run every role on this machine as child processes on loopback addresses:
a metadata server on 127.0.0.10:7400 and I/O servers on 127.0.0.11:7410,
127.0.0.12:7410, ... Data and logs go under --data; a second run reuses them.
Ctrl-C stops everything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if iods < 1 || iods > 200 {
				return fmt.Errorf("--iods %d: want 1..200", iods)
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(data)
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			listens := make([]string, iods)
			for i := range listens {
				listens[i] = fmt.Sprintf("127.0.0.%d:7410", 11+i)
			}
			fsys, err := launch.StartFS(ctx, bin, abs, "127.0.0.10:7400", listens)
			if err != nil {
				return err
			}
			fmt.Printf("corral is up (data and logs in %s)\n\n", abs)
			fmt.Printf("  meta  %-20s log %s\n", fsys.Meta.Addr, fsys.Meta.Log)
			for _, p := range fsys.IODs {
				fmt.Printf("  %-5s %-20s log %s\n", p.Name, p.Addr, p.Log)
			}
			fmt.Printf(`
Try, in another terminal:
  export CORRAL_META=%s
  %[2]s fs mkdir -p /www
  %[2]s fs put /etc/services /www/
  %[2]s fs ls -l /www
  %[2]s fs stat /www/services
  mkdir -p /tmp/corral && %[2]s mount /tmp/corral     # FUSE; needs /dev/fuse

Ctrl-C stops everything.
`, fsys.Meta.Addr, bin)
			died := make(chan string, len(fsys.IODs)+1)
			for _, p := range append(fsys.IODs, fsys.Meta) {
				go func() {
					<-p.Done()
					died <- p.Name
				}()
			}
			select {
			case <-ctx.Done():
				fmt.Println("\nstopping...")
				fsys.Stop()
				fmt.Println("stopped")
				return nil
			case name := <-died:
				fsys.Stop()
				return fmt.Errorf("%s exited unexpectedly; see its log under %s", name, filepath.Join(abs, "logs"))
			}
		},
	}
	c.Flags().StringVar(&data, "data", "corral-data", "directory for every role's data and logs")
	c.Flags().IntVar(&iods, "iods", 3, "number of I/O servers")
	return c
}
