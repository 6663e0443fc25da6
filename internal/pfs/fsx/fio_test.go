package fsx_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestFioVerify runs fio's verify jobs with overlapping random writes
// (testdata/overlap.fio) on a real mount: every block fio wrote last must
// read back with its checksum, offset and sequence number.
func TestFioVerify(t *testing.T) {
	needFUSE(t)
	lab.Need(t, lab.Tool("fio"))
	fio, err := exec.LookPath("fio")
	if err != nil {
		t.Fatal(err)
	}
	job, err := filepath.Abs("testdata/overlap.fio")
	if err != nil {
		t.Fatal(err)
	}
	mnt := mountFS(t, pfstest.Binary(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := command(t, ctx, fio, "--directory="+mnt, "--output-format=json", job)
	cmd.Dir = t.TempDir() // anything fio leaves in its working directory
	out, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	if err != nil {
		t.Fatalf("fio: %v\n%s\n%s", err, stderr, out)
	}
	var res struct {
		Jobs []struct {
			Name  string `json:"jobname"`
			Error int    `json:"error"`
			Read  struct {
				Bytes int64 `json:"io_bytes"`
			} `json:"read"`
			Write struct {
				Bytes int64 `json:"io_bytes"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("fio's JSON output: %v\n%s", err, out)
	}
	if len(res.Jobs) != 2 {
		t.Fatalf("fio ran %d jobs, want 2:\n%s", len(res.Jobs), out)
	}
	for _, j := range res.Jobs {
		// Written and verified bytes both count: a job that verified
		// nothing would pass vacuously.
		if j.Error != 0 || j.Write.Bytes == 0 || j.Read.Bytes == 0 {
			t.Errorf("fio job %s: error %d, wrote %d bytes, verified %d", j.Name, j.Error, j.Write.Bytes, j.Read.Bytes)
		}
		t.Logf("fio job %s: wrote %d MiB, verified %d KiB", j.Name, j.Write.Bytes>>20, j.Read.Bytes>>10)
	}
	t.Logf("fio on the mount: %s", time.Since(start).Round(time.Millisecond))
	if ents, _ := os.ReadDir(mnt); len(ents) == 0 {
		t.Error("fio left no files: did it write to the mount?")
	}
}
