package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

const feedbackGood = `feedback {
    source snmp
    interval 500ms
    v3 user=mon auth=sha256:/etc/corral/auth priv=AES:/etc/corral/priv
    port 16161
    agent-port 9081
    ifname eth1
    bandwidth 100mbit
    cpu cpuraw
    load-minutes 5
    floor 2
    max 200
    target 0.8
    dead-band 0.1
    smoothing 0.5
    timeout 300ms
    source-addr 10.87.0.1
}
service www {
    vip 127.0.87.100:80
    scheduler wlc
    weights feedback
    server 127.0.87.21:80
}
`

func TestFeedbackGood(t *testing.T) {
	d, err := Parse("d.conf", []byte(feedbackGood))
	if err != nil {
		t.Fatal(err)
	}
	want := &Feedback{Line: 1, Source: "snmp", Interval: 500 * time.Millisecond, Version: "3",
		User: "mon", AuthProto: "SHA256", AuthFile: "/etc/corral/auth", PrivProto: "AES", PrivFile: "/etc/corral/priv",
		Port: 16161, AgentPort: 9081, IfName: "eth1", Bandwidth: 100e6, CPU: "cpuraw", LoadMin: 5, Floor: 2, Max: 200,
		Target: 0.8, DeadBand: 0.1, Smoothing: 0.5, Timeout: 300 * time.Millisecond, SourceAddr: "10.87.0.1"}
	if !reflect.DeepEqual(d.Feedback, want) {
		t.Fatalf("got  %+v\nwant %+v", d.Feedback, want)
	}
	if d.Services[0].Weights != "feedback" {
		t.Fatalf("weights %q", d.Services[0].Weights)
	}
	// Format gives the same configuration back.
	again, err := Parse("d.conf", []byte(Format(d)))
	if err != nil {
		t.Fatalf("%v\n%s", err, Format(d))
	}
	again.Feedback.Line, d.Feedback.Line = 0, 0
	if !reflect.DeepEqual(again.Feedback, d.Feedback) || again.Services[0].Weights != "feedback" {
		t.Fatalf("round trip: %+v", again.Feedback)
	}
	// Defaults, and community from a file.
	d, err = Parse("d.conf", []byte("feedback {\n community file:/etc/c\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f := d.Feedback; f.Source != "snmp" || f.Interval != 2*time.Second || f.Port != 161 || f.AgentPort != 9080 ||
		f.CommFile != "/etc/c" || f.Version != "2c" || f.Floor != 1 || f.Max != 100 || f.CPU != "laload" {
		t.Fatalf("defaults: %+v", f)
	}
	if s := NewService("x"); s.Weights != "config" {
		t.Fatalf("default weights %q", s.Weights)
	}
	for _, v := range []struct {
		in   string
		want uint64
	}{{"100mbit", 1e8}, {"1gbit", 1e9}, {"64kbit", 64e3}, {"1000", 1000}, {"10Gbit", 1e10}} {
		if got, err := ParseBandwidth(v.in); err != nil || got != v.want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", v.in, got, err, v.want)
		}
	}
}

func TestFeedbackErrorsNameTheirPlace(t *testing.T) {
	// block is a feedback block with one line added at line 2, and a
	// service using it from line 4.
	block := func(extra string) string {
		return "feedback {\n" + extra + "\n}\nservice www {\n vip 127.0.87.100:80\n weights feedback\n server 127.0.87.21:80\n}\n"
	}
	cases := []struct{ conf, want string }{
		{block("source ldap"), `d.conf:2: feedback: source: "ldap": want snmp or agent`},
		{block("interval 10ms"), `d.conf:2: feedback: interval: "10ms": want a duration, 100ms..1m0s`},
		{block("interval"), `d.conf:2: feedback: interval: want exactly one value, got 0`},
		{block("community file:etc/c"), `d.conf:2: feedback: community: "file:etc/c": want file:/ABSOLUTE/PATH`},
		{block("v3 user=mon auth=SHA:/a"), `d.conf:2: feedback: v3: want user=NAME auth=PROTO:/FILE priv=PROTO:/FILE (authPriv only)`},
		{block("v3 user=mon auth=SHA1:/a priv=AES:/p"), `d.conf:2: feedback: v3: auth "SHA1:/a": want PROTO:/FILE with PROTO one of SHA, SHA224, SHA256, SHA384, SHA512 or MD5`},
		{block("v3 user=mon auth=SHA:/a priv=AES:p"), `d.conf:2: feedback: v3: priv "AES:p": want PROTO:/FILE`},
		{block("port 0"), `d.conf:2: feedback: port: "0": want 1..65535`},
		{block("bandwidth fast"), `d.conf:2: feedback: bandwidth: "fast": want a link speed like 100mbit`},
		{block("cpu idle"), `d.conf:2: feedback: cpu: "idle": want laload or cpuraw`},
		{block("load-minutes 2"), `d.conf:2: feedback: load-minutes: "2": want 1, 5 or 15`},
		{block("max 70000"), `d.conf:2: feedback: max: "70000": want 1..65535`},
		{block("floor 20\nmax 10"), `d.conf:1: feedback: floor: floor 20 above max 10`},
		{block("smoothing 0"), `d.conf:2: feedback: smoothing: "0": want a number in (0, 1]`},
		{block("dead-band 2"), `d.conf:2: feedback: dead-band: "2": want a number in [0, 1]`},
		{block("source-addr here"), `d.conf:2: feedback: source-addr: "here" is not an address`},
		{block("frobnicate 1"), `d.conf:2: feedback: frobnicate: unknown field`},
		{block("service x {"), `d.conf:2: service: the feedback block is not closed before this service`},
		{"feedback {\n}\nfeedback {\n}\n", `d.conf:3: feedback: feedback block already defined on line 1`},
		{"feedback {\nsource agent\n", `d.conf:1: feedback: not closed: missing '}'`},
		{"feedback\n", `d.conf:1: feedback: want: feedback {`},
		{"service www {\n vip 127.0.87.100:80\n weights feedback\n server 127.0.87.21:80\n}\n",
			`d.conf:1: service www: weights: feedback needs the director's feedback { } block`},
		{"feedback {\n}\nservice www {\n vip 127.0.87.100:80\n scheduler rr\n weights feedback\n}\n",
			`d.conf:3: service www: weights: feedback with scheduler rr, which ignores weights: use wrr, wlc, sed, nq, mh or mwlc`},
		{"feedback {\n}\nservice www {\n vip 127.0.87.100:80\n weights load\n}\n",
			`d.conf:5: service www: weights: want weights config|feedback`},
	}
	for _, c := range cases {
		_, err := Parse("d.conf", []byte(c.conf))
		if err == nil {
			t.Errorf("%q: no error, want %s", c.conf, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got  %v\n want %s", c.conf, err, c.want)
		}
	}
}

// sameFeedbackBlock: a and b configure the same thing (lines aside).
func sameFeedbackBlock(a, b *Feedback) bool {
	x, y := *a, *b
	x.Line, y.Line = 0, 0
	return reflect.DeepEqual(x, y)
}

// TestFeedbackNoDefaultCommunity: the block's community has no default
// (it was "public"), and Format writes no empty community line.
func TestFeedbackNoDefaultCommunity(t *testing.T) {
	d, err := Parse("d.conf", []byte("feedback {\n source snmp\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Feedback.Community != "" {
		t.Fatalf("default community %q, want none", d.Feedback.Community)
	}
	if _, err := Parse("d.conf", []byte(Format(d))); err != nil {
		t.Fatalf("Format without a community does not parse: %v\n%s", err, Format(d))
	}
}
