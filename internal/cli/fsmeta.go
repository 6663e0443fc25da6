package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/meta"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
)

// metaAdminCmd is 'corral fs meta': the replicated metadata group's
// members, their changes, backup and restore.
func metaAdminCmd(_ fsRunner) *cobra.Command {
	run := metaRun
	c := &cobra.Command{Use: "meta members|add|remove|backup|restore", Short: "Manage the metadata members: list, add, remove, back up, restore",
		Long: `Manage the metadata servers (docs/meta.md). With 'corral meta --peers' the
metadata is replicated by 3 or 5 members through Raft; these commands show
and change the group, and take and restore backups. Requests that change
something go to the leader (found through the member --meta names).`,
		Example: `  corral fs meta members
  corral fs meta add 4 127.0.0.4:7400     # then: corral meta --id 4 --join ...
  corral fs meta remove 2
  corral fs meta backup meta-2026-11-25.bak
  corral fs meta restore meta-2026-11-25.bak --data /var/lib/corral/meta-new`}
	var asJSON bool
	members := &cobra.Command{Use: "members [--json]", Short: "List the members: role, term, applied index, lag, activity",
		Long: `List the metadata members as the leader sees them:
  ROLE     leader, follower, or learner (catching up; promoted to a voting
           follower automatically once caught up)
  MATCH    the highest log index the leader knows the member holds
  LAG      commit index - MATCH: entries the member still lacks
  ACTIVE   the leader heard from it within the last 1.5 s
Without a leader (no quorum) the member asked answers with its own view.`,
		Example: `  corral fs meta members
  corral fs meta members --json`, Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, cl *client.Client, _ []string) error {
			r, err := groupView(ctx, cl)
			if err != nil {
				return err
			}
			if asJSON {
				return printMembersJSON(r)
			}
			return printMembers(r)
		})}
	members.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	add := &cobra.Command{Use: "add ID HOST:PORT", Short: "Add a member (it enters as a learner and votes once caught up)",
		Long: `Add member ID at HOST:PORT to the group. Then start it on an empty data
directory with 'corral meta --id ID --listen HOST:PORT --join': it receives a
snapshot and the log from the leader, and becomes a voting member once it has
caught up. To replace a member: add the new one, wait until 'members' shows
it as a follower, then remove the old one.`,
		Example: `  corral fs meta add 4 127.0.0.4:7400`, Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			id, err := memberID(args[0])
			if err != nil {
				return err
			}
			r, _, err := callLeader(ctx, cl, &proto.MemberChange{Change: proto.MemberAdd, ID: id, Addr: args[1]})
			if err != nil {
				return err
			}
			fmt.Printf("member %d at %s added as a learner; start it with: corral meta --id %d --listen %s --join --data DIR\n", id, args[1], id, args[1])
			return printMembers(r.(*proto.MembersReply))
		})}

	remove := &cobra.Command{Use: "remove ID", Short: "Remove a member from the group",
		Long: `Remove member ID. Its process stops taking part (stop it afterwards). Removing
the leader makes the others elect a new one.`,
		Example: `  corral fs meta remove 2`, Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			id, err := memberID(args[0])
			if err != nil {
				return err
			}
			r, _, err := callLeader(ctx, cl, &proto.MemberChange{Change: proto.MemberRemove, ID: id})
			if err != nil {
				return err
			}
			fmt.Printf("member %d removed\n", id)
			return printMembers(r.(*proto.MembersReply))
		})}

	backup := &cobra.Command{Use: "backup FILE", Short: "Write a consistent snapshot of the metadata to FILE, online",
		Long: `Ask the leader for a consistent snapshot of the metadata (every change
acknowledged before the command started is in it) and write it to FILE.
FILE appears whole or not at all (written beside it, synced, renamed).
Restore it with 'corral fs meta restore'.`,
		Example: `  corral fs meta backup /backups/meta-2026-11-25.bak`, Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			return backupTo(ctx, cl, args[0])
		})}

	var restoreData string
	restore := &cobra.Command{Use: "restore FILE --data DIR", Short: "Seed a new member's empty data directory from a backup (offline)",
		Long: `Put the metadata of a backup into DIR, which must hold no store and no
Raft log. Start the member as a new group of one, then add the others:
  corral fs meta restore FILE --data DIR
  corral meta --id 1 --listen ADDR1 --peers 1=ADDR1 --data DIR
  corral fs meta add 2 ADDR2     # and start member 2 with --join; same for 3
The I/O servers keep the file data; the backup holds names, attributes and
layouts, so files written after the backup are not in it.`,
		Example: `  corral fs meta restore meta.bak --data /var/lib/corral/meta`, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if restoreData == "" {
				return usageError{errors.New("restore needs --data DIR (the new member's data directory)")}
			}
			if err := meta.RestoreBackup(args[0], restoreData); err != nil {
				return err
			}
			fmt.Printf("restored %s into %s; start it with: corral meta --id 1 --listen ADDR --peers 1=ADDR --data %s\n", args[0], restoreData, restoreData)
			return nil
		}}
	restore.Flags().StringVar(&restoreData, "data", "", "the new member's (empty) data directory")

	c.AddCommand(members, add, remove, backup, restore)
	return c
}

// metaRun is fs's runner without its reach check: that check reads the
// root, which needs a quorum, and 'members' must answer without one (it is
// how one finds out why there is none).
func metaRun(f func(ctx context.Context, cl *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		get := func(name string) string { v, _ := cmd.Flags().GetString(name); return v }
		insecure, _ := cmd.Flags().GetBool("insecure")
		sf := secFlags{secretFile: get("secret-file"), cert: get("tls-cert"), key: get("tls-key"), ca: get("tls-ca"), insecure: insecure, client: true}
		sec, err := sf.security(false)
		if err != nil {
			return err
		}
		ctx, stop := signalContext()
		defer stop()
		cl := client.New(get("meta"), client.WithSecurity(sec))
		cl.Uid, cl.Gid = uint32(os.Getuid()), uint32(os.Getgid())
		defer cl.Close()
		return f(ctx, cl, args)
	}
}

func memberID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usageError{fmt.Errorf("invalid member ID %q: a number > 0 (see corral fs meta members)", s)}
	}
	return id, nil
}

// callLeader sends req to the --meta member, and to the leader it names if
// it is not the leader. It returns the reply and the address that gave it.
func callLeader(ctx context.Context, cl *client.Client, req proto.Msg) (proto.Msg, string, error) {
	// The client follows not-leader answers itself; Current is the member
	// that answered, which later chunks of a backup must come from.
	r, err := cl.Call(ctx, req)
	if err != nil {
		return nil, "", err
	}
	return r, cl.Leader().Current(), nil
}

// groupView is the leader's view of the group when there is a leader, else
// the asked member's.
func groupView(ctx context.Context, cl *client.Client) (*proto.MembersReply, error) {
	r, err := cl.Call(ctx, &proto.Members{})
	if err != nil {
		return nil, err
	}
	mr := r.(*proto.MembersReply)
	if mr.Leader == 0 || mr.Leader == mr.ID {
		return mr, nil
	}
	for _, m := range mr.Members {
		if m.ID == mr.Leader && m.Addr != "" {
			if lr, err := cl.Pool().Call(ctx, m.Addr, &proto.Members{}); err == nil {
				return lr.(*proto.MembersReply), nil
			}
		}
	}
	return mr, nil
}

func role(r *proto.MembersReply, m proto.MemberInfo) string {
	switch {
	case m.ID == r.Leader:
		return "leader"
	case m.Learner:
		return "learner"
	}
	return "follower"
}

func printMembers(r *proto.MembersReply) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tROLE\tTERM\tMATCH\tLAG\tACTIVE")
	for _, m := range r.Members {
		match, lag, active := "-", "-", "-"
		if r.Leader == r.ID { // only the leader knows the others' progress
			match, lag, active = strconv.FormatUint(m.Match, 10), strconv.FormatUint(r.Commit-min(m.Match, r.Commit), 10), yesNo(m.Active)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Addr, role(r, m), r.Term, match, lag, active)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	who := fmt.Sprintf("member %d", r.ID)
	if r.Leader == 0 {
		who += " (no leader known: election in progress, or no quorum)"
	}
	fmt.Printf("view of %s: commit %d, applied %d\n", who, r.Commit, r.Applied)
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printMembersJSON(r *proto.MembersReply) error {
	type member struct {
		ID      uint64 `json:"id"`
		Addr    string `json:"addr"`
		Role    string `json:"role"`
		Match   uint64 `json:"match"`
		Lag     uint64 `json:"lag"`
		Active  bool   `json:"active"`
		Learner bool   `json:"learner"`
	}
	out := struct {
		From    uint64   `json:"from"`
		Leader  uint64   `json:"leader"`
		Term    uint64   `json:"term"`
		Commit  uint64   `json:"commit"`
		Applied uint64   `json:"applied"`
		Members []member `json:"members"`
	}{r.ID, r.Leader, r.Term, r.Commit, r.Applied, []member{}}
	for _, m := range r.Members {
		out.Members = append(out.Members, member{m.ID, m.Addr, role(r, m), m.Match, r.Commit - min(m.Match, r.Commit), m.Active, m.Learner})
	}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(out)
}

// backupTo streams a backup from the leader into path atomically.
func backupTo(ctx context.Context, cl *client.Client, path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	r, addr, err := callLeader(ctx, cl, &proto.Backup{})
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	br, ok := r.(*proto.BackupReply)
	if !ok {
		return fmt.Errorf("backup: %s answered %T", addr, r)
	}
	p := newProgress("backup", int64(br.Size))
	var off uint64
	for {
		if br.Offset != off {
			return fmt.Errorf("backup: %s sent the chunk at %d, expected %d", addr, br.Offset, off)
		}
		if _, err := tmp.Write(br.Data); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		off += uint64(len(br.Data))
		p.set(int64(off))
		if br.Done {
			break
		}
		if len(br.Data) == 0 {
			return fmt.Errorf("backup: %s sent an empty chunk at %d of %d", addr, off, br.Size)
		}
		r, err := cl.Pool().Call(ctx, addr, &proto.Backup{Token: br.Token, Offset: off})
		if err != nil {
			return fmt.Errorf("backup from %s at %d of %d bytes: %w", addr, off, br.Size, err)
		}
		if br, ok = r.(*proto.BackupReply); !ok {
			return fmt.Errorf("backup: %s answered %T", addr, r)
		}
	}
	p.done()
	if off != br.Size {
		return fmt.Errorf("backup: got %d of %d bytes", off, br.Size)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	fmt.Printf("backup %s: %s from the leader at %s\n", path, human(int64(off)), addr)
	return nil
}
