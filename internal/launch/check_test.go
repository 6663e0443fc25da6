package launch

import (
	"os"
	"path/filepath"
	"testing"
)

// TestKeptConfChecksDecide: the nodes answer /healthz on their service port
// when the director.conf that runs, a kept one included, checks it there
// (a check line without port=, as corral up wrote before checks moved to
// the admin port); otherwise only on the admin port. Before, a kept old
// file left every node failing its check.
func TestKeptConfChecksDecide(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "director.conf")
	c := &Cluster{Cfg: ClusterConfig{NodeListen: []string{"127.0.0.21:8080"}}, ConfPath: conf}
	if c.checksServicePort() {
		t.Errorf("fresh conf (check on port 9080): nodes told to answer on the service port")
	}
	c.ConfKept = true
	for text, want := range map[string]bool{
		"service www {\n  check http path=/healthz status=200 # old\n}\n":          true,
		"service www {\n  check http port=9080 path=/healthz status=200\n}\n":      false,
		"service www {\n  check tcp\n}\n# check http path=/healthz in a comment\n": false,
	} {
		os.WriteFile(conf, []byte(text), 0o644)
		if got := c.checksServicePort(); got != want {
			t.Errorf("kept conf %q: checksServicePort %v, want %v", text, got, want)
		}
	}
}
