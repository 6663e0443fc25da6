// Package lab holds what tests share to describe the machine they need.
//
// Need is the capability gate: a test that cannot run here (not root, no
// /dev/fuse, a tool scripts/deps installs is missing) skips with the
// reason on a developer's machine, and fails when $CORRAL_CI is 1, so that
// CI cannot turn green by skipping.
package lab

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CIEnv names the variable that turns a missing capability into a
// failure; .ci/run sets it to 1.
const CIEnv = "CORRAL_CI"

// CI reports whether the tests run in CI ($CORRAL_CI=1).
func CI() bool { return os.Getenv(CIEnv) == "1" }

// A Cap is one thing a test needs from the machine. Missing returns why
// it is not there, or "" when it is.
type Cap struct {
	Name    string
	Missing func() string
}

// Root: the tests run as uid 0 (mount(2), network namespaces, BPF,
// setuid to nobody).
var Root = Cap{"root", func() string {
	if os.Geteuid() != 0 {
		return "needs root (run the tests as root, as CI does)"
	}
	return ""
}}

// FUSE: root and a /dev/fuse to mount with mount(2).
var FUSE = Cap{"fuse", func() string {
	if why := Root.Missing(); why != "" {
		return "FUSE mounts " + why
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "needs /dev/fuse: " + err.Error()
	}
	return ""
}}

// Netns: root, iproute2's ip and tc and util-linux's nsenter, to build
// network namespaces, veth pairs and bridges (the test bed).
var Netns = Cap{"netns", func() string {
	if why := Root.Missing(); why != "" {
		return "network namespaces " + why
	}
	for _, p := range []string{"ip", "tc", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			return "network namespaces need " + p + " (scripts/deps installs iproute2, util-linux)"
		}
	}
	return ""
}}

// XDP: root, to load and attach BPF programs.
var XDP = Cap{"xdp", func() string {
	if why := Root.Missing(); why != "" {
		return "loading XDP programs " + why
	}
	return ""
}}

// Chromium: a headless browser for the dashboard's browser tests.
var Chromium = Cap{"chromium", func() string {
	if ChromiumPath() == "" {
		return "needs chromium (scripts/deps installs it)"
	}
	return ""
}}

// ChromiumPath finds Debian's chromium (or another Chrome), "" if none.
func ChromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Tool: a program on $PATH (or at an absolute path), one scripts/deps
// installs.
func Tool(name string) Cap {
	return Cap{"tool " + name, func() string {
		if _, err := exec.LookPath(name); err != nil {
			return "needs " + name + " (scripts/deps installs it): " + err.Error()
		}
		return ""
	}}
}

// Need checks every capability; when any is missing it fails the test
// under $CORRAL_CI=1 and skips it otherwise, naming all that is missing.
func Need(t testing.TB, caps ...Cap) {
	t.Helper()
	if why := missing(caps); why != "" {
		if CI() {
			t.Fatal(why + " ($" + CIEnv + "=1: CI must not skip this)")
		}
		t.Skip(why)
	}
}

// Have is Need for an optional part of a test: it reports whether every
// capability is there, logging what is missing; under $CORRAL_CI=1 a
// missing one fails the test, as Need does.
func Have(t testing.TB, caps ...Cap) bool {
	t.Helper()
	why := missing(caps)
	if why == "" {
		return true
	}
	if CI() {
		t.Fatal(why + " ($" + CIEnv + "=1: CI must not leave this part out)")
	}
	t.Log(why + ": that part is left out")
	return false
}

// Err is a capability a package checks itself (testbed.CheckRoot, a
// probe of the kernel): missing when err is not nil.
func Err(what string, err error) Cap {
	return Cap{what, func() string {
		if err != nil {
			return what + ": " + err.Error()
		}
		return ""
	}}
}

func missing(caps []Cap) string {
	var whys []string
	for _, c := range caps {
		if why := c.Missing(); why != "" {
			whys = append(whys, why)
		}
	}
	return strings.Join(whys, "; ")
}
