package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The baseline: keepalived (VRRP) moves the VIP between two directors; an
// nftables rule on each director's link forwards VIP traffic by direct
// routing, as IPVS would (this kernel has no IPVS): at the netdev ingress
// hook, a TCP frame to VIP:80 gets a real server's MAC, chosen by a jhash of
// the client's address and port, and the director's own MAC as source, and
// goes back out of the same link. The hash has a fixed seed, so both
// directors send a flow to the same real server: the baseline needs no
// state sync for established flows to survive a change of director (it is
// stateless consistent hashing); what it lacks is a fence: whether two
// directors forward at once is up to VRRP.

// Keepalived runs the baseline on an HA bed's directors.
type Keepalived struct {
	hb    *HABed
	mu    sync.Mutex
	procs map[string]*exec.Cmd
	done  map[string]chan struct{}
}

// KeepalivedVersion is what `keepalived --version` says, or an error if
// it is not installed.
func KeepalivedVersion() (string, error) {
	for _, tool := range []string{"keepalived", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s not installed (scripts/deps installs it)", tool)
		}
	}
	out, _ := exec.Command("keepalived", "--version").CombinedOutput()
	return strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0], nil
}

// NewKeepalived prepares the baseline on directors d1 and d2 of hb (their
// Corral directors must be stopped first).
func NewKeepalived(hb *HABed) *Keepalived {
	return &Keepalived{hb: hb, procs: map[string]*exec.Cmd{}, done: map[string]chan struct{}{}}
}

func (k *Keepalived) dir(name string) string { return filepath.Join(k.hb.Cfg.Data, "keepalived", name) }

// nftRules is director name's forwarding table. It matches frames sent to
// the director's own MAC only: the ingress hook also sees frames the bridge
// floods (to a MAC it has not learnt or has forgotten, as when a port goes
// down), and forwarding those would make a standby forward.
func (k *Keepalived) nftRules(name string) (string, error) {
	d, err := k.hb.Director(name)
	if err != nil {
		return "", err
	}
	var macs []string
	i := 0
	for _, n := range k.hb.Cluster.Cfg.NodeListen {
		for mac, addr := range k.hb.NodeMACs {
			if addr+":80" == n {
				macs = append(macs, fmt.Sprintf("%d : %s", i, mac))
				i++
			}
		}
	}
	return fmt.Sprintf(`table netdev corralbase {
	chain ingress {
		type filter hook ingress device eth0 priority 0; policy accept;
		ether daddr %s ip daddr %s tcp dport %d ether saddr set %s ether daddr set jhash ip saddr . tcp sport mod %d seed 0x5eed map { %s } fwd to eth0
	}
}
`, d.MAC, k.hb.VIP.Addr(), k.hb.VIP.Port(), d.MAC, len(macs), strings.Join(macs, ", ")), nil
}

// Start starts director name's forwarder and keepalived (priority 200 for
// d1, 100 for the others; advert_int 1 s, preemption on: Debian's defaults
// as a first configuration would have them).
func (k *Keepalived) Start(ctx context.Context, name string) error {
	d, err := k.hb.Director(name)
	if err != nil {
		return err
	}
	dir := k.dir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rules, err := k.nftRules(name)
	if err != nil {
		return err
	}
	rf := filepath.Join(dir, "dr.nft")
	if err := os.WriteFile(rf, []byte(rules), 0o644); err != nil {
		return err
	}
	k.hb.Bed.IP(name, "addr", "del", k.hb.VIP.Addr().String()+"/32", "dev", "eth0") // a killed run's leftover
	nftDel := exec.Command("ip", "netns", "exec", k.hb.Bed.Netns(name), "nft", "delete", "table", "netdev", "corralbase")
	nftDel.Run()
	if out, err := exec.Command("ip", "netns", "exec", k.hb.Bed.Netns(name), "nft", "-f", rf).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: nft -f %s: %v: %s", name, rf, err, strings.TrimSpace(string(out)))
	}
	conf := fmt.Sprintf(`global_defs {
    router_id %s
    script_user root
}
vrrp_instance web {
    state BACKUP
    interface eth0
    virtual_router_id 51
    priority %d
    advert_int 1
    virtual_ipaddress {
        %s/32 dev eth0
    }
}
`, name, d.Priority, k.hb.VIP.Addr())
	cf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "keepalived.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd, err := k.hb.Bed.Command(context.Background(), name, "keepalived", "--dont-fork", "--log-console", "--log-detail", "--vrrp",
		"--use-file", cf, "--pid", filepath.Join(dir, "keepalived.pid"), "--vrrp_pid", filepath.Join(dir, "vrrp.pid"))
	if err != nil {
		logf.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: keepalived: %w", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	k.mu.Lock()
	k.procs[name], k.done[name] = cmd, done
	k.mu.Unlock()
	return nil
}

// Master is the director that holds the VIP on its link (ip addr), or "".
// Two holding it at once is reported as "d1+d2".
func (k *Keepalived) Master() string {
	var who []string
	for _, d := range k.hb.Directors {
		out, _ := exec.Command("ip", "netns", "exec", k.hb.Bed.Netns(d.Name), "ip", "-o", "addr", "show", "dev", "eth0").Output()
		if strings.Contains(string(out), " "+k.hb.VIP.Addr().String()+"/") {
			who = append(who, d.Name)
		}
	}
	return strings.Join(who, "+")
}

// WaitMaster waits (at most timeout) until only name holds the VIP.
func (k *Keepalived) WaitMaster(name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		m := k.Master()
		if m == name {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("keepalived: %s not the only master after %v (VIP on %q)", name, timeout, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill is a director's death: keepalived killed with SIGKILL (no
// goodbye advert) and, at the same instant, its forwarding rule and the VIP
// gone, as they would be with the machine. It returns the moment of the
// kill.
func (k *Keepalived) Kill(name string) (time.Time, error) {
	k.mu.Lock()
	cmd, done := k.procs[name], k.done[name]
	delete(k.procs, name)
	k.mu.Unlock()
	if cmd == nil {
		return time.Time{}, fmt.Errorf("keepalived on %s is not running", name)
	}
	at := time.Now()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	// The VIP first: with the rule gone and the VIP still local, the
	// director's own stack would answer the clients' segments with resets.
	k.hb.Bed.IP(name, "addr", "del", k.hb.VIP.Addr().String()+"/32", "dev", "eth0")
	exec.Command("ip", "netns", "exec", k.hb.Bed.Netns(name), "nft", "delete", "table", "netdev", "corralbase").Run()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		return at, fmt.Errorf("keepalived on %s did not die within 5s", name)
	}
	return at, nil
}

// Stop ends keepalived on name cleanly (SIGTERM: it sends a priority-0
// advert, so the backup takes over at once: VRRP's handover) and returns
// when it has exited, with the moment of the signal. The forwarding rule
// stays, as it would on a director whose keepalived was stopped.
func (k *Keepalived) Stop(name string) (time.Time, error) {
	k.mu.Lock()
	cmd, done := k.procs[name], k.done[name]
	delete(k.procs, name)
	k.mu.Unlock()
	if cmd == nil {
		return time.Time{}, nil
	}
	at := time.Now()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	return at, nil
}

// Close stops every keepalived and removes the rules and the VIP.
func (k *Keepalived) Close() {
	for _, d := range k.hb.Directors {
		k.Stop(d.Name)
		exec.Command("ip", "netns", "exec", k.hb.Bed.Netns(d.Name), "nft", "delete", "table", "netdev", "corralbase").Run()
		k.hb.Bed.IP(d.Name, "addr", "del", k.hb.VIP.Addr().String()+"/32", "dev", "eth0")
	}
}
