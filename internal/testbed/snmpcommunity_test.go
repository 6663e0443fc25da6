package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSNMPNoPublicCommunity: with no community given, a bed's snmpd
// admits a generated one kept 0600 (in a 0700 directory) for the poller,
// the same for every host; never "public", which it admitted before.
func TestSNMPNoPublicCommunity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	c1, err := SNMPCommunity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c1 == "public" || len(c1) < 32 {
		t.Fatalf("generated community %q", c1)
	}
	if c2, err := SNMPCommunity(dir); err != nil || c2 != c1 {
		t.Fatalf("second host's community %q, %v; want the first's", c2, err)
	}
	p := filepath.Join(dir, SNMPCommunityFile)
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want 0600", p, err, fi.Mode())
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %04o, want 0700", dir, fi.Mode().Perm())
	}
	conf, err := snmpdConf(SNMPConfig{Community: c1}, 2)
	if err != nil || !strings.Contains(conf, "rocommunity "+c1+" ") || strings.Contains(conf, "public") {
		t.Fatalf("snmpd.conf %q, %v", conf, err)
	}
	conf, err = snmpdConf(SNMPConfig{V3User: "mon", V3Auth: "authpass1", V3Priv: "privpass1"}, 2)
	if err != nil || strings.Contains(conf, "rocommunity") {
		t.Fatalf("v3 only: snmpd.conf %q, %v", conf, err)
	}
	if _, err := snmpdConf(SNMPConfig{}, 2); err == nil {
		t.Error("snmpd.conf with neither community nor v3 user accepted")
	}
	// A community file others may read is refused, not used.
	os.Chmod(p, 0o644)
	if _, err := SNMPCommunity(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("0644 community file: %v", err)
	}
}
