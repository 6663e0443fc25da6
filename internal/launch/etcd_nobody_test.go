package launch_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// asNobody runs a command as user nobody (uid and gid 65534), bounded to
// 10 s; its combined output and error.
func asNobody(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUpEtcdAsNobody: on a running corral up, user nobody tries the
// station's etcd as a local user would (curl to the JSON gateway on
// 7601 for the CA's key, the sync key and the tokens; a put of a token
// record; the peer port 7602): plain http, and TLS without a client
// certificate. Nothing is read or written, and the station still serves.
func TestUpEtcdAsNobody(t *testing.T) {
	lab.Need(t, lab.Root, lab.Tool("curl")) // runs curl as user nobody
	m := startManaged(t, 1)
	client, peer := stationNet+".1:7601", stationNet+".1:7602"
	for _, key := range []string{"/corral/tls/ca", "/corral/ha/key", "/corral/tokens/"} {
		body := `{"key":"` + b64(key) + `","range_end":"` + b64(key+"\xff") + `"}`
		for _, u := range []string{"http://" + client, "https://" + client} {
			out, err := asNobody(t, "curl", "-sS", "-k", "-m", "3", "-X", "POST", u+"/v3/kv/range", "-d", body)
			if strings.Contains(out, `"kvs"`) || (err == nil && strings.Contains(out, `"header"`)) {
				t.Errorf("nobody: curl %s/v3/kv/range %s: %v %.300s", u, key, err, out)
			}
		}
	}
	put := `{"key":"` + b64("/corral/tokens/evil") + `","value":"` + b64(`{"kind":"api","role":"admin"}`) + `"}`
	for _, u := range []string{"http://" + client, "https://" + client} {
		if out, err := asNobody(t, "curl", "-sS", "-k", "-m", "3", "-X", "POST", u+"/v3/kv/put", "-d", put); err == nil && strings.Contains(out, `"header"`) {
			t.Errorf("nobody: curl %s/v3/kv/put: %.300s", u, out)
		}
	}
	for _, u := range []string{"http://" + peer, "https://" + peer} {
		if out, err := asNobody(t, "curl", "-sS", "-k", "-m", "3", u+"/members"); err == nil && strings.Contains(out, "peerURLs") {
			t.Errorf("nobody: curl %s/members: %.300s", u, out)
		}
	}
	var toks []api.Token
	if err := m.call(http.MethodGet, api.RouteTokens, nil, &toks); err != nil {
		t.Fatalf("the station after the probes: %v", err)
	}
	for _, tk := range toks {
		if tk.ID == "evil" {
			t.Fatal("nobody wrote a token record")
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
