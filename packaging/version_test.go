package main

import "testing"

func TestDebVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v0.1.0":                  "0.1.0",
		"v0.1.0-dirty":            "0.1.0+dirty",
		"v0.1.0-4-gabc1234":       "0.1.0+git4.abc1234",
		"v0.1.0-4-gabc1234-dirty": "0.1.0+git4.abc1234.dirty",
		"0.2.0~rc1":               "0.2.0~rc1",
		"abc1234":                 "0.0.0~git.abc1234",
		"(devel)":                 "0.0.0~devel",
	} {
		got, err := DebVersion(in)
		if err != nil || got != want {
			t.Errorf("DebVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"banana", "v1.2.3 4", "-1"} {
		if v, err := DebVersion(bad); err == nil {
			t.Errorf("DebVersion(%q) = %q, want an error", bad, v)
		}
	}
}
