/* Packet parsing: Ethernet, IPv4 (any header length) or IPv6 (fixed
 * header), then TCP or UDP ports. Every read is bounds-checked against
 * data_end; anything not understood is left to the kernel (XDP_PASS). */
#pragma once
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "structs.h"

enum parse_result {
	PARSE_OK = 0,
	PARSE_OTHER,     /* not IP, or not TCP/UDP: pass */
	PARSE_MALFORMED, /* truncated or inconsistent headers: pass */
	PARSE_FRAGMENT,  /* IPv4 fragment: pass */
};

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

struct packet {
	struct flow_key key;
	__u8 tcp_flags;
};

static __always_inline int parse_l4(void *l4, void *data_end, __u8 proto, struct packet *p)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return PARSE_MALFORMED;
		if (th->doff < 5)
			return PARSE_MALFORMED;
		p->key.sport = th->source;
		p->key.dport = th->dest;
		/* byte 13 of the header holds the flags */
		p->tcp_flags = ((__u8 *)th)[13];
		return PARSE_OK;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return PARSE_MALFORMED;
		p->key.sport = uh->source;
		p->key.dport = uh->dest;
		return PARSE_OK;
	}
	return PARSE_OTHER;
}

static __always_inline int parse(void *data, void *data_end, struct packet *p)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return PARSE_MALFORMED;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return PARSE_MALFORMED;
		if (ip->version != 4 || ip->ihl < 5)
			return PARSE_MALFORMED;
		if (ip->frag_off & bpf_htons(0x3fff)) /* MF set or an offset */
			return PARSE_FRAGMENT;
		if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
			return PARSE_OTHER;
		void *l4 = (void *)ip + ip->ihl * 4;
		if (l4 > data_end)
			return PARSE_MALFORMED;
		p->key.src[2] = bpf_htonl(0xffff);
		p->key.src[3] = ip->saddr;
		p->key.dst[2] = bpf_htonl(0xffff);
		p->key.dst[3] = ip->daddr;
		p->key.proto = ip->protocol;
		return parse_l4(l4, data_end, ip->protocol, p);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return PARSE_MALFORMED;
		if (ip6->version != 6)
			return PARSE_MALFORMED;
		/* Extension headers are not walked: such packets pass. */
		if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
			return PARSE_OTHER;
		__builtin_memcpy(p->key.src, &ip6->saddr, 16);
		__builtin_memcpy(p->key.dst, &ip6->daddr, 16);
		p->key.proto = ip6->nexthdr;
		return parse_l4(ip6 + 1, data_end, ip6->nexthdr, p);
	}
	return PARSE_OTHER;
}
