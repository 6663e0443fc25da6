// SPDX-License-Identifier: GPL-2.0
/* Passes every frame. Attached to the far end of a veth whose near end
 * runs the balancer: a veth delivers XDP_TX'd frames to its peer only when
 * the peer has an XDP program (GRO alone did not do it on kernel 6.18). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("xdp")
int pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
