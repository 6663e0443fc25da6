package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/testbed"
	"github.com/spf13/cobra"
)

// defaultHosts are the hosts of `corral testbed up` by default: the roles of
// `corral up --testbed`.
var defaultHosts = "client,director,node1,node2,node3,meta,iod1,iod2,iod3"

func testbedCmd() *cobra.Command {
	var name string
	c := &cobra.Command{
		Use:   "testbed up|down|status|exec",
		Short: "A lab of hosts on this machine: network namespaces on a bridge, links shaped by tc (root)",
		Long: `Build the papers' lab on one machine: each host is a network namespace with
one veth into a shared bridge and an address on 10.77.0.0/24; each link can be
shaped in both directions (tc htb), e.g. to the papers' 100 Mbit/s. Everything
is named after the bed (--name) and 'down' removes it all: processes, mounts,
namespaces, links — also after a failed 'up'. Needs root.`,
		Example: `  corral testbed up --rate 100mbit
  corral testbed status
  corral testbed exec client -- ping -c1 10.77.0.11
  corral testbed down`,
	}
	c.PersistentFlags().StringVar(&name, "name", "corral", "test bed name (prefix of its namespaces and links, at most 8 characters)")
	var hosts, rate string
	var hostRates []string
	up := &cobra.Command{Use: "up [--hosts a,b,c] [--rate 100mbit] [--host-rate NAME=RATE]", Short: "Build the test bed (idempotent)",
		Example: `  corral testbed up --rate 100mbit
  corral testbed up --hosts client,director,node1,node2 --host-rate node2=10mbit`, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec := testbed.NewSpec(name, strings.Split(hosts, ","), rate)
			for _, hr := range hostRates {
				h, r, ok := strings.Cut(hr, "=")
				if !ok {
					return fmt.Errorf("--host-rate %q: want NAME=RATE", hr)
				}
				found := false
				for i := range spec.Hosts {
					if spec.Hosts[i].Name == h {
						spec.Hosts[i].Rate, found = r, true
					}
				}
				if !found {
					return fmt.Errorf("--host-rate %q: no host %s", hr, h)
				}
			}
			b, err := testbed.Up(spec)
			if err != nil {
				return err
			}
			return printState(b)
		}}
	up.Flags().StringVar(&hosts, "hosts", defaultHosts, "host names, comma-separated")
	up.Flags().StringVar(&rate, "rate", "", "link speed of every host, both directions (e.g. 100mbit, 1gbit; empty: unshaped)")
	up.Flags().StringArrayVar(&hostRates, "host-rate", nil, "link speed of one host: NAME=RATE (repeatable)")
	down := &cobra.Command{Use: "down", Short: "Remove everything the test bed made",
		Example: `  corral testbed down
  corral testbed down --name lab2`, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := testbed.CheckRoot(); err != nil {
				return err
			}
			return testbed.Down(name)
		}}
	status := &cobra.Command{Use: "status", Short: "Hosts, addresses, link speeds and processes",
		Example: `  corral testbed status`, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := testbed.Load(name)
			if err != nil {
				return err
			}
			return printState(b)
		}}
	exe := &cobra.Command{Use: "exec HOST -- COMMAND [ARG...]", Short: "Run a command on a host",
		Example: `  corral testbed exec client -- curl -s http://10.77.0.2/
  corral testbed exec node1 -- ip addr`, Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := testbed.Load(name)
			if err != nil {
				return err
			}
			x, err := b.Command(cmd.Context(), args[0], args[1:]...)
			if err != nil {
				return err
			}
			x.Stdin, x.Stdout, x.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := x.Run(); err != nil {
				if ee, ok := err.(interface{ ExitCode() int }); ok && ee.ExitCode() > 0 {
					return exitError{ee.ExitCode()}
				}
				return err
			}
			return nil
		}}
	c.AddCommand(up, down, status, exe, tcpSinkCmd(), tcpSendCmd())
	return c
}

func printState(b *testbed.Bed) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "HOST\tADDRESS\tNAMESPACE\tLINK\tRATE\tPROCESSES\n")
	for _, s := range b.State() {
		link := "down"
		if s.Link {
			link = "up"
		}
		r := s.Shaped
		if r == "" {
			r = "unshaped"
		}
		ns := b.Netns(s.Host.Name)
		if !s.Netns {
			ns += " (missing)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", s.Host.Name, s.Host.Addr, ns, link, r, s.Procs)
	}
	return tw.Flush()
}

// tcp-sink and tcp-send measure a link with raw TCP (the benchmarks' I).
func tcpSinkCmd() *cobra.Command {
	var listen string
	c := &cobra.Command{Use: "tcp-sink --listen ADDR", Short: "Accept TCP connections and discard what they send (for measuring links)", Hidden: true,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			ready("tcp-sink", l.Addr().String())
			for {
				c, err := l.Accept()
				if err != nil {
					return err
				}
				go func() { io.Copy(io.Discard, c); c.Close() }()
			}
		}}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:5001", "address to accept on")
	return c
}

func tcpSendCmd() *cobra.Command {
	var size string
	var maxTime time.Duration
	c := &cobra.Command{Use: "tcp-send ADDR [--bytes 64M]", Short: "Send bytes over TCP and print the rate (for measuring links)", Hidden: true,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			buf := make([]byte, 256<<10)
			start := time.Now()
			c.SetWriteDeadline(start.Add(maxTime))
			var sent int64
			for sent < n {
				k, err := c.Write(buf[:min(int64(len(buf)), n-sent)])
				sent += int64(k)
				if err != nil {
					break
				}
			}
			// The last writes only fill socket buffers (megabytes): the
			// transfer ends when the sink, having read everything, closes.
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(start.Add(maxTime))
			io.Copy(io.Discard, c)
			el := time.Since(start)
			fmt.Printf("%d bytes in %.3f s: %.2f MB/s (%.1f Mbit/s)\n", sent, el.Seconds(), float64(sent)/1e6/el.Seconds(), float64(sent)*8/1e6/el.Seconds())
			return nil
		}}
	c.Flags().StringVar(&size, "bytes", "64M", "bytes to send")
	c.Flags().DurationVar(&maxTime, "max-time", 60*time.Second, "stop after this long")
	return c
}
