package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const missingTool = "corral-no-such-tool-for-the-gate-test"

// TestNeedChild is the test TestNeed runs in a child process, with and
// without $CORRAL_CI, to see the gate skip or fail.
func TestNeedChild(t *testing.T) {
	if os.Getenv("LAB_NEED_CHILD") != "1" {
		t.Skip("the child of TestNeed (runs only as its child)")
	}
	if os.Getenv("LAB_NEED_HAVE") == "1" {
		if !Have(t, Tool(missingTool)) {
			t.Log("went without the part")
		}
		return
	}
	Need(t, Tool(missingTool))
	t.Log("ran past the gate")
}

func TestNeed(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"", false, "--- SKIP: TestNeedChild"},
		{"0", false, "--- SKIP: TestNeedChild"},
		{"1", true, "--- FAIL: TestNeedChild"},
	} {
		cmd := exec.Command(exe, "-test.run", "^TestNeedChild$", "-test.v")
		cmd.Env = append(os.Environ(), "LAB_NEED_CHILD=1", CIEnv+"="+c.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.wantFail {
			t.Errorf("CORRAL_CI=%q: exit error %v, want failure %v:\n%s", c.ci, err, c.wantFail, out)
		}
		if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), missingTool) {
			t.Errorf("CORRAL_CI=%q: want %q naming %s, got:\n%s", c.ci, c.want, missingTool, out)
		}
		if strings.Contains(string(out), "ran past the gate") {
			t.Errorf("CORRAL_CI=%q: the test ran on without its tool:\n%s", c.ci, out)
		}
	}
}

// A capability that is there lets the test run, under CI too.
func TestNeedPresent(t *testing.T) {
	t.Setenv(CIEnv, "1")
	Need(t, Tool("go"), Err("nothing", nil))
	if !Have(t, Tool("go")) {
		t.Error("Have(go) is false")
	}
}

// Have leaves an optional part out on a laptop and fails under CI.
func TestHave(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for ci, wantFail := range map[string]bool{"": false, "1": true} {
		cmd := exec.Command(exe, "-test.run", "^TestNeedChild$", "-test.v")
		cmd.Env = append(os.Environ(), "LAB_NEED_CHILD=1", "LAB_NEED_HAVE=1", CIEnv+"="+ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != wantFail {
			t.Errorf("CORRAL_CI=%q: exit error %v, want failure %v:\n%s", ci, err, wantFail, out)
		}
		if went := strings.Contains(string(out), "went without the part"); went == wantFail {
			t.Errorf("CORRAL_CI=%q: went on without the part: %v, want %v:\n%s", ci, went, !wantFail, out)
		}
	}
}

func TestFilter(t *testing.T) {
	f, err := os.Open("testdata/gotest.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	skips, err := Filter(f, &out)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, s := range skips {
		got = append(got, s.Package+" "+s.Test+": "+s.Reason)
	}
	want := []string{
		"example.com/s/a TestSkipRoot: a_test.go:6: needs root",
		"example.com/s/a TestSub/long: a_test.go:8: set LONG=1",
		"example.com/s/b TestMeasure: b_test.go:5: a measurement: MEASURE=1 runs it",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("skips:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	o := out.String()
	for _, w := range []string{"boom", "what went wrong", "--- FAIL: TestFail", "FAIL\texample.com/s/a", "ok  \texample.com/s/b", "example.com/s/c\t[no test files]"} {
		if !strings.Contains(o, w) {
			t.Errorf("output lacks %q:\n%s", w, o)
		}
	}
	if strings.Contains(o, "=== RUN   TestPass") || strings.Contains(o, "TestOK") {
		t.Errorf("output has passed tests' lines:\n%s", o)
	}

	path := filepath.Join(t.TempDir(), "allow.txt")
	os.WriteFile(path, []byte("# comment\nTestMeasure\ta measurement, behind MEASURE=1\nTestSub/long  long mode\n"), 0o600)
	allow, err := ReadAllow(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := Mark(skips, allow)
	if len(bad) != 1 || bad[0].Test != "TestSkipRoot" {
		t.Errorf("not allowed: %+v, want only TestSkipRoot", bad)
	}
	var table strings.Builder
	Table(&table, skips)
	if !strings.Contains(table.String(), "NOT ALLOWED s/a TestSkipRoot") && !strings.Contains(table.String(), "NOT ALLOWED example.com/s/a TestSkipRoot") {
		t.Errorf("table:\n%s", table.String())
	}
}

func TestReadAllowNeedsWhy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.txt")
	os.WriteFile(path, []byte("TestX\n"), 0o600)
	if _, err := ReadAllow(path); err == nil || !strings.Contains(err.Error(), "TestX") {
		t.Errorf("a line without a why: err %v, want one naming TestX", err)
	}
}
