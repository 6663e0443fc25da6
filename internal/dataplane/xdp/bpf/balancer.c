// SPDX-License-Identifier: GPL-2.0
/* Corral's XDP director: LVS direct routing (VS/DR) in the kernel.
 *
 * A frame for a VIP service is matched to its flow in the connection table;
 * a new flow (TCP SYN, or a UDP flow not in the table) is scheduled onto a
 * real server. The frame leaves by the port it came in, with the real
 * server's MAC as destination and the director's as source; IP headers are
 * untouched, so the real server (holding the VIP on its loopback) answers
 * the client directly. Everything else passes to the kernel. */
#include <linux/bpf.h>
#include "sched.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline void count_drop(struct svc_stats *ss, int reason)
{
	if (ss && reason >= 0 && reason < NUM_DROPS)
		ss->drops[reason]++;
}

static __always_inline void add_conns(__u32 sid, __u32 slot, __s64 active, __s64 inactive)
{
	__u32 idx = sid * MAX_REALS + (slot & (MAX_REALS - 1));
	struct real_conns *rc = bpf_map_lookup_elem(&real_conns, &idx);
	if (!rc)
		return;
	if (active)
		__sync_fetch_and_add(&rc->active, active);
	if (inactive)
		__sync_fetch_and_add(&rc->inactive, inactive);
}

/* pass counts a frame left to the kernel, by the parser's verdict. */
static __always_inline int pass(int parse_result)
{
	__u32 zero = 0;
	struct global_stats *gs = bpf_map_lookup_elem(&global_stats, &zero);
	if (gs) {
		if (parse_result == PARSE_MALFORMED)
			gs->malformed++;
		else if (parse_result == PARSE_FRAGMENT)
			gs->fragments++;
		else
			gs->passed++;
	}
	return XDP_PASS;
}

/* emit queues a connection-table change for the Go side, when it reads
 * them (dp_config.events). A full ring buffer is counted: the peers then
 * need a full resync, which the Go side sees in the lost count. */
static __always_inline void emit(struct dp_config *cfg, struct flow_key *key, __u32 sid, __u32 slot, __u32 state, __u32 op)
{
	if (!cfg->events)
		return;
	struct conn_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		__u32 zero = 0;
		struct global_stats *gs = bpf_map_lookup_elem(&global_stats, &zero);
		if (gs)
			gs->events_lost++;
		return;
	}
	__builtin_memcpy(&ev->key, key, sizeof(ev->key));
	ev->svc = sid;
	ev->slot = slot;
	ev->state = state;
	ev->op = op;
	bpf_ringbuf_submit(ev, 0);
}

/* track follows a known TCP flow's state as LVS does in DR, seeing only the
 * client's side: FIN or RST ends it (active -> inactive). */
static __always_inline void track(struct dp_config *cfg, struct flow_key *key, __u32 sid, struct conn *c, __u8 flags)
{
	if (flags & (TCP_FIN | TCP_RST)) {
		if (__sync_val_compare_and_swap(&c->state, CONN_ESTABLISHED, CONN_FIN) == CONN_ESTABLISHED) {
			add_conns(sid, c->slot, -1, 1);
			emit(cfg, key, sid, c->slot, CONN_FIN, CONN_OP_UPDATE);
		}
	}
}

/* fence_closed says whether HA_FENCED forbids forwarding now. It reads the
 * clock, so it is asked only for frames of a VIP service. */
static __always_inline int fence_closed(struct dp_config *cfg)
{
	return cfg->ha_mode == HA_FENCED && bpf_ktime_get_ns() >= cfg->fence;
}

/* fenced counts a VIP frame left to the kernel by a closed fence; the VIP
 * is not local in HA mode, so the kernel drops it. */
static __always_inline int fenced(void)
{
	__u32 zero = 0;
	struct global_stats *gs = bpf_map_lookup_elem(&global_stats, &zero);
	if (gs)
		gs->fenced++;
	return XDP_PASS;
}

struct arp_ipv4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

/* arp answers an ARP request for one of the VIPs (arp_vips) in HA_FENCED
 * mode while the fence is open, turning the frame into the reply in place:
 * in HA mode the VIP is not on the interface (the kernel would go on
 * answering for it after the director died), so the program speaks for
 * it, and a director that is frozen or cut off stops by itself. */
static __always_inline int arp(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct arp_ipv4 *a = (void *)(eth + 1);
	if ((void *)(a + 1) > data_end)
		return pass(PARSE_OTHER);
	if (a->htype != bpf_htons(1) || a->ptype != bpf_htons(ETH_P_IP) || a->hlen != ETH_ALEN || a->plen != 4 ||
	    a->op != bpf_htons(1))
		return pass(PARSE_OTHER);
	__u32 tpa;
	__builtin_memcpy(&tpa, a->tpa, 4);
	if (!bpf_map_lookup_elem(&arp_vips, &tpa))
		return pass(PARSE_OTHER);
	__u32 zero = 0;
	struct dp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || cfg->ha_mode != HA_FENCED || fence_closed(cfg))
		return pass(PARSE_OTHER);
	struct global_stats *gs = bpf_map_lookup_elem(&global_stats, &zero);
	if (gs)
		gs->arp_replies++;
	a->op = bpf_htons(2);
	__builtin_memcpy(a->tha, a->sha, ETH_ALEN);
	__builtin_memcpy(a->tpa, a->spa, 4);
	__builtin_memcpy(a->sha, cfg->arp_mac, ETH_ALEN);
	__builtin_memcpy(a->spa, &tpa, 4);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, cfg->arp_mac, ETH_ALEN);
	return XDP_TX;
}

/* The frame nd() turns a solicitation into: Ethernet, IPv6, an
 * advertisement with the target link-layer address option. */
#define ND_NA_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + 32)

struct nd_msg {
	__u8 type;
	__u8 code;
	__be16 csum;
	__be32 flags;
	__u8 target[16];
	__u8 opt_type;
	__u8 opt_len;
	__u8 opt_mac[ETH_ALEN];
};

/* nd answers a neighbour solicitation for one of the VIPs (nd_vips) as
 * arp() answers ARP: with a solicited, overriding advertisement carrying
 * the MAC, only in HA_FENCED mode with the fence open. Duplicate address
 * detection probes (from ::) pass. */
static __always_inline int nd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	struct nd_msg *m = (void *)(ip6 + 1);
	/* type .. target: 24 bytes */
	if ((void *)m + 24 > data_end)
		return pass(PARSE_OTHER);
	if (ip6->version != 6 || ip6->nexthdr != IPPROTO_ICMPV6 || ip6->hop_limit != 255 || m->type != 135 ||
	    m->code != 0)
		return pass(PARSE_OTHER);
	if (!(ip6->saddr.in6_u.u6_addr32[0] | ip6->saddr.in6_u.u6_addr32[1] | ip6->saddr.in6_u.u6_addr32[2] |
	      ip6->saddr.in6_u.u6_addr32[3]))
		return pass(PARSE_OTHER);
	__u8 target[16];
	__builtin_memcpy(target, m->target, 16);
	if (!bpf_map_lookup_elem(&nd_vips, target))
		return pass(PARSE_OTHER);
	__u32 zero = 0;
	struct dp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || cfg->ha_mode != HA_FENCED || fence_closed(cfg))
		return pass(PARSE_OTHER);
	/* Make room for the option when the solicitation had none; a longer
	 * frame keeps its tail (the IPv6 length says where ours ends). */
	long room = (long)ND_NA_LEN - (long)(data_end - data);
	if (room > 0) {
		if (room > 8 || bpf_xdp_adjust_tail(ctx, (int)room))
			return pass(PARSE_OTHER);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
	}
	if (data + ND_NA_LEN > data_end)
		return XDP_DROP; /* cannot happen: checked or grown above */
	eth = data;
	ip6 = (void *)(eth + 1);
	m = (void *)(ip6 + 1);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, cfg->arp_mac, ETH_ALEN);
	ip6->payload_len = bpf_htons(32);
	__builtin_memcpy(&ip6->daddr, &ip6->saddr, 16);
	__builtin_memcpy(&ip6->saddr, target, 16);
	m->type = 136;
	m->code = 0;
	m->csum = 0;
	m->flags = bpf_htonl(0x60000000); /* solicited, override */
	m->opt_type = 2;                  /* target link-layer address */
	m->opt_len = 1;
	__builtin_memcpy(m->opt_mac, cfg->arp_mac, ETH_ALEN);
	/* The checksum: the pseudo-header (addresses, length 32, next header
	 * 58) and the 32-byte message, in 16-bit words. */
	__u32 sum = 32 + IPPROTO_ICMPV6;
	__u16 *w = (__u16 *)&ip6->saddr;
#pragma unroll
	for (int i = 0; i < 16; i++)
		sum += bpf_ntohs(w[i]);
	w = (__u16 *)m;
#pragma unroll
	for (int i = 0; i < 16; i++)
		sum += bpf_ntohs(w[i]);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	m->csum = bpf_htons(~sum & 0xffff);
	struct global_stats *gs = bpf_map_lookup_elem(&global_stats, &zero);
	if (gs)
		gs->arp_replies++;
	return XDP_TX;
}

/* not_mine says whether the frame's destination is a MAC other than the
 * director's own (arp_mac; unset: every frame is taken). parse() checked
 * the Ethernet header's bounds. */
static __always_inline int not_mine(struct dp_config *cfg, void *data)
{
	struct ethhdr *eth = data;
	__u8 *m = cfg->arp_mac;
	if (!(m[0] | m[1] | m[2] | m[3] | m[4] | m[5]))
		return 0;
	return (eth->h_dest[0] ^ m[0]) | (eth->h_dest[1] ^ m[1]) | (eth->h_dest[2] ^ m[2]) |
	       (eth->h_dest[3] ^ m[3]) | (eth->h_dest[4] ^ m[4]) | (eth->h_dest[5] ^ m[5]);
}

SEC("xdp")
int balancer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct packet p = {};

	int r = parse(data, data_end, &p);
	if (r != PARSE_OK) {
		struct ethhdr *eth = data;
		if (r == PARSE_OTHER && (void *)(eth + 1) <= data_end) {
			if (eth->h_proto == bpf_htons(ETH_P_ARP))
				return arp(data, data_end);
			if (eth->h_proto == bpf_htons(ETH_P_IPV6))
				return nd(ctx);
		}
		return pass(r);
	}

	/* Most frames that are not for a service stop here, at one array
	 * lookup: no service listens on their destination port. */
	__u32 word = bpf_ntohs(p.key.dport) >> 6;
	__u64 *ports = bpf_map_lookup_elem(&vip_ports, &word);
	if (!ports || !(*ports & (1ULL << (bpf_ntohs(p.key.dport) & 63))))
		return pass(0);

	struct dp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS; /* cannot happen: an array of one */
	/* In a group, a frame for another director's MAC is not ours: a bridge
	 * floods unknown unicast to every port, and two directors forwarding
	 * one flooded frame would duplicate it (active-active) or a standby
	 * would forward beside the active. */
	if (cfg->ha_mode != HA_OFF && not_mine(cfg, data))
		return pass(0);
	__u64 now = cfg->now;
	__u64 len = data_end - data;
	__u32 sid, slot;
	struct svc_stats *ss;
	int is_tcp = p.key.proto == IPPROTO_TCP;
	int syn = is_tcp && (p.tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	int new_flow = 0;
	int reused = 0;

	/* A known flow needs one lookup: its entry names service and slot. */
	struct conn *c = bpf_map_lookup_elem(&conns, &p.key);
	if (c && fence_closed(cfg))
		return fenced();
	if (c && syn) {
		/* A SYN on a known flow is a new connection reusing the port (or
		 * a retransmitted SYN). It is scheduled afresh when the old flow
		 * has ended (IPVS's conn_reuse_mode) or its server no longer
		 * takes new flows (down, drained, removed), so that a client
		 * whose connection was refused by a dead server does not follow
		 * it there again. Deleting first makes one CPU alone take the old
		 * flow off the counts. */
		__u32 old = c->slot, state = c->state, osid = c->svc;
		__u32 oidx = osid * MAX_REALS + (old & (MAX_REALS - 1));
		struct real *orl = bpf_map_lookup_elem(&reals, &oidx);
		if (state == CONN_FIN || !orl || !(orl->flags & REAL_F_AVAILABLE)) {
			if (bpf_map_delete_elem(&conns, &p.key) == 0) {
				if (state == CONN_ESTABLISHED)
					add_conns(osid, old, -1, 0);
				else
					add_conns(osid, old, 0, -1);
			}
			c = 0;
			reused = 1;
		}
	}
	if (c) {
		sid = c->svc;
		slot = c->slot;
		ss = bpf_map_lookup_elem(&svc_stats, &sid);
		if (is_tcp)
			track(cfg, &p.key, sid, c, p.tcp_flags);
		if (c->seen != now) /* one write a second, not per packet */
			c->seen = now;
	} else {
		struct vip_key vk = {.port = p.key.dport, .proto = p.key.proto};
		__builtin_memcpy(vk.addr, p.key.dst, sizeof(vk.addr));
		struct service *svc = bpf_map_lookup_elem(&services, &vk);
		if (!svc)
			return pass(0);
		/* (a reused flow's fence was checked above: one clock read) */
		if (!reused && fence_closed(cfg))
			return fenced();
		sid = svc->id;
		ss = bpf_map_lookup_elem(&svc_stats, &sid);
		int pos;
		if (is_tcp && !syn && !(svc->flags & SVC_F_SCHED_NON_SYN)) {
			/* HA: a flow of another director that did not reach this
			 * one's table (the gap before a takeover) goes where
			 * every director of the group would put it. */
			if (!(svc->flags & SVC_F_MH_FALLBACK)) {
				count_drop(ss, DROP_NO_CONN);
				return XDP_DROP;
			}
			pos = sched_mh(svc, &p);
		} else {
			pos = schedule(svc, &p);
		}
		if (pos < 0 || (__u32)pos >= svc->n) {
			count_drop(ss, DROP_NO_REAL);
			return XDP_DROP;
		}
		slot = svc->pool[pos & (MAX_REALS - 1)];
		struct conn nc = {.svc = sid, .slot = slot, .seen = now};
		if (!is_tcp)
			nc.state = CONN_UDP;
		else if (p.tcp_flags & (TCP_FIN | TCP_RST))
			nc.state = CONN_FIN;
		else
			nc.state = CONN_ESTABLISHED;
		if (bpf_map_update_elem(&conns, &p.key, &nc, BPF_NOEXIST) == 0) {
			new_flow = 1;
			emit(cfg, &p.key, sid, slot, nc.state, CONN_OP_NEW);
			if (nc.state == CONN_ESTABLISHED)
				add_conns(sid, slot, 1, 0);
			else
				add_conns(sid, slot, 0, 1);
		} else {
			/* another CPU inserted the flow first: follow it */
			c = bpf_map_lookup_elem(&conns, &p.key);
			if (!c) {
				count_drop(ss, DROP_CONN_ERR);
				return XDP_DROP;
			}
			slot = c->slot;
		}
	}
	if (ss) {
		ss->packets++;
		ss->bytes += len;
	}

	__u32 ridx = sid * MAX_REALS + (slot & (MAX_REALS - 1));
	struct real *rl = bpf_map_lookup_elem(&reals, &ridx);
	if (!rl || !(rl->mac[0] | rl->mac[1] | rl->mac[2] | rl->mac[3] | rl->mac[4] | rl->mac[5])) {
		count_drop(ss, DROP_NO_MAC);
		return XDP_DROP;
	}
	struct real_stats *rs = bpf_map_lookup_elem(&real_stats, &ridx);
	if (rs) {
		rs->packets++;
		rs->bytes += len;
		rs->new_conns += new_flow;
	}
	if (ss)
		ss->new_conns += new_flow;

	struct ethhdr *eth = data; /* parse() checked its bounds */
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	if ((cfg->mac[0] | cfg->mac[1] | cfg->mac[2] | cfg->mac[3] | cfg->mac[4] | cfg->mac[5]))
		__builtin_memcpy(eth->h_source, cfg->mac, ETH_ALEN);
	else
		__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, rl->mac, ETH_ALEN);
	return XDP_TX;
}
