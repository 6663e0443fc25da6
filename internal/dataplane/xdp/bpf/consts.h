/* Sizes and codes shared with the Go side (internal/dataplane/xdp/maps.go
 * mirrors every number here; a test checks them against the loaded maps). */
#pragma once

/* Services (VIP:port/protocol) one director can carry. */
#define MAX_SERVICES 64
/* Real-server slots per service. A removed server keeps its slot until its
 * last connection is gone, so slots outnumber the configured pool. Must be
 * a power of two (indexes are masked with it for the verifier). */
#define MAX_REALS 64
/* ip_vs_sh's table: 2^8 buckets. */
#define SH_BITS 8
#define SH_SIZE (1 << SH_BITS)
/* Maglev lookup table: Katran's prime (2^16 + 1), at least 100 x
 * MAX_REALS. Directors of one group must agree on it: the fallback of
 * high availability schedules a flow where any of them would. */
#define MH_SIZE 65537
/* Default connection-table size; the Go side may change it before loading. */
#define CONN_TABLE_SIZE 262144

/* Schedulers, as named in internal/sched. */
enum sched_kind {
	SCHED_RR = 1,
	SCHED_WRR = 2,
	SCHED_LC = 3,
	SCHED_WLC = 4,
	SCHED_SED = 5,
	SCHED_NQ = 6,
	SCHED_SH = 7,
	SCHED_MH = 8,
};

/* Connection states, as the director sees one direction of a flow. */
enum conn_state {
	CONN_ESTABLISHED = 1, /* TCP from SYN on: counts as active */
	CONN_FIN = 2,         /* TCP after the client's FIN or RST: inactive */
	CONN_UDP = 3,         /* UDP flow: inactive, as in IPVS */
};

/* Why a packet for a VIP was dropped. */
enum drop_reason {
	DROP_NO_REAL = 0,  /* no real server can take a new flow */
	DROP_NO_CONN = 1,  /* TCP segment of an unknown flow, not a SYN */
	DROP_NO_MAC = 2,   /* the real server's MAC is not known yet */
	DROP_CONN_ERR = 3, /* the connection table refused the flow */
	NUM_DROPS = 4,
};

/* Service flags. */
#define SVC_F_SCHED_NON_SYN 1 /* sh, mh: a mid-flow miss is scheduled (same answer) */
#define SVC_F_MH_FALLBACK 2   /* HA: a mid-flow miss goes through the Maglev table */

/* High-availability modes (internal/dataplane/xdp HAMode). */
enum ha_mode {
	HA_OFF = 0,         /* forward always */
	HA_FENCED = 1,      /* forward and answer ARP only before dp_config.fence */
	HA_ACTIVE_ACTIVE = 2, /* forward always, no ARP */
};

/* Connection-table changes sent to the Go side (ring buffer). */
enum conn_op {
	CONN_OP_NEW = 1,    /* the flow was scheduled (or replaced a reused one) */
	CONN_OP_UPDATE = 2, /* the client's FIN or RST */
	CONN_OP_DELETE = 3, /* the Go side emits these itself */
};

/* The event ring buffer's size in bytes (a power of two, page multiple):
 * 4 MiB hold about 70000 events. */
#define EVENTS_SIZE (4 << 20)
/* VIPs the program answers ARP (IPv4) or neighbour solicitations (IPv6)
 * for, of each family. */
#define MAX_ARP_VIPS 256

/* Real-server flags. */
#define REAL_F_AVAILABLE 1 /* in the pool with a weight: takes new flows */

/* Position meaning "none" in the scheduler tables. */
#define POS_NONE 0xff
