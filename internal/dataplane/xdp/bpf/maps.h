/* The maps. The Go side (internal/dataplane/xdp) writes services, pools,
 * tables and MACs, and reads counters and connections. */
#pragma once
#include "structs.h"

/* VIP:port/protocol -> the service. A hash map so that an update replaces
 * the whole value at once. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SERVICES);
	__type(key, struct vip_key);
	__type(value, struct service);
} services SEC(".maps");

/* Destination port / 64 -> a bit per port some service listens on (TCP
 * or UDP, any VIP): most frames not for a service pass after this one
 * cheap array lookup. Port in host order. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536 / 64);
	__type(key, __u32);
	__type(value, __u64);
} vip_ports SEC(".maps");

/* Service id -> rr/wrr position. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct sched_state);
} sched_states SEC(".maps");

/* Service id * 2 + buffer -> Maglev table. Two per service: the Go side
 * fills the idle one, then flips service.mh_buf. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SERVICES * 2);
	__type(key, __u32);
	__type(value, struct mh_table);
} mh_tables SEC(".maps");

/* Service id * MAX_REALS + slot -> the real server's MAC. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SERVICES * MAX_REALS);
	__type(key, __u32);
	__type(value, struct real);
} reals SEC(".maps");

/* Service id * MAX_REALS + slot -> active/inactive connections, changed
 * with atomic adds from every CPU (and by the Go side's expiry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SERVICES * MAX_REALS);
	__type(key, __u32);
	__type(value, struct real_conns);
} real_conns SEC(".maps");

/* Service id * MAX_REALS + slot -> connections the Go side expired. Only
 * the Go side writes it (a map update there would race with the atomic adds
 * above); a slot's counts are real_conns minus this. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SERVICES * MAX_REALS);
	__type(key, __u32);
	__type(value, struct real_conns);
} real_expired SEC(".maps");

/* The connection table: a flow stays on its real server for its life.
 * LRU so that a flood of new flows evicts the oldest instead of failing;
 * the Go side expires idle flows with IPVS's timeouts. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, CONN_TABLE_SIZE);
	__type(key, struct flow_key);
	__type(value, struct conn);
} conns SEC(".maps");

/* Key 0 -> the director's settings. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_config);
} config SEC(".maps");

/* Service id -> counters (per CPU; the Go side sums). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct svc_stats);
} svc_stats SEC(".maps");

/* Service id * MAX_REALS + slot -> counters (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SERVICES * MAX_REALS);
	__type(key, __u32);
	__type(value, struct real_stats);
} real_stats SEC(".maps");

/* Key 0 -> counters of traffic that is not for a service (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct global_stats);
} global_stats SEC(".maps");

/* IPv4 VIP (network order) -> 1: the addresses the program answers ARP
 * requests for in HA_FENCED mode while the fence is open. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ARP_VIPS);
	__type(key, __u32);
	__type(value, __u8);
} arp_vips SEC(".maps");

/* IPv6 VIP -> 1: the addresses the program answers neighbour
 * solicitations for, as arp_vips. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ARP_VIPS);
	__type(key, __u8[16]);
	__type(value, __u8);
} nd_vips SEC(".maps");

/* Connection-table changes for the Go side, which streams them to the
 * other directors of the group (struct conn_event records). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EVENTS_SIZE);
} events SEC(".maps");
