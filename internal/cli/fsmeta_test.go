package cli

import (
	"errors"
	"testing"
)

func TestRaftFlags(t *testing.T) {
	peers := "1=127.0.0.1:7400,2=127.0.0.2:7400,3=127.0.0.3:7400"
	ok := raftFlags{id: 2, peers: peers}
	if err := ok.check("127.0.0.2:7400"); err != nil || len(ok.parsed) != 3 || ok.parsed[3] != "127.0.0.3:7400" {
		t.Fatalf("%v %v", err, ok.parsed)
	}
	if err := (&raftFlags{}).check("x"); err != nil {
		t.Errorf("no replication flags: %v", err)
	}
	for _, f := range []raftFlags{
		{id: 2, peers: peers, join: true},                   // both
		{peers: peers},                                      // no id
		{id: 4, peers: peers},                               // not in peers
		{id: 1, peers: peers},                               // --listen differs from its entry
		{id: 1, peers: "1=a:1,1=b:1"},                       // duplicate ID
		{id: 1, peers: "1=127.0.0.2:7400,2=127.0.0.2:7400"}, // duplicate address
		{id: 1, peers: "1:127.0.0.2:7400"},                  // no =
		{id: 1, peers: "0=127.0.0.2:7400"},                  // ID 0
		{id: 1},                                             // --id alone
		{join: true},                                        // --join without --id
	} {
		err := f.check("127.0.0.2:7400")
		var u usageError
		if !errors.As(err, &u) {
			t.Errorf("%+v: %v, want a usage error", f, err)
		}
	}
}
