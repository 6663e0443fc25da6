package xdp

import (
	"net/netip"
	"testing"
	"time"
)

// BenchmarkEstablished is the established-flow path through the kernel's
// test run (corral bench director reports it beside the floor).
func BenchmarkEstablished(b *testing.B) {
	d := load(b)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wlc", Servers: reals(8)}); err != nil {
		b.Fatal(err)
	}
	f := Frame{Src: netip.AddrPortFrom(client, 1000), Dst: vip, Flags: SYN}
	run(b, d.Program(), f.Bytes())
	f.Flags, f.Payload = ACK, 100
	_, per, err := d.Program().Benchmark(f.Bytes(), b.N, b.ResetTimer)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(per.Nanoseconds()), "kernel-ns/packet")
}

// BenchmarkEstablishedFenced is the same path in HAFenced mode with the
// fence open: one clock read more per packet.
func BenchmarkEstablishedFenced(b *testing.B) {
	d := load(b)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wlc", Servers: reals(8)}); err != nil {
		b.Fatal(err)
	}
	if err := d.SetHA(HAFenced, MonoNow()+time.Hour); err != nil {
		b.Fatal(err)
	}
	f := Frame{Src: netip.AddrPortFrom(client, 1000), Dst: vip, Flags: SYN}
	run(b, d.Program(), f.Bytes())
	f.Flags, f.Payload = ACK, 100
	_, per, err := d.Program().Benchmark(f.Bytes(), b.N, b.ResetTimer)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(per.Nanoseconds()), "kernel-ns/packet")
}
