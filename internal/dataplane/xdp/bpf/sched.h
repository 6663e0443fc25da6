/* In-kernel schedulers with internal/sched's semantics (LVS's): the same
 * state gives the same position. Each returns a position in the pool
 * (0..n-1) or -1 when no server can take the flow. Ties go to the first
 * position; weight 0 takes no new flows. */
#pragma once
#include "maps.h"
#include "parse.h"

#define POS_MASK (MAX_REALS - 1)

static __always_inline int sched_rr(struct service *svc)
{
	__u32 id = svc->id, n = svc->n;
	struct sched_state *st = bpf_map_lookup_elem(&sched_states, &id);
	if (!st || n == 0 || n > MAX_REALS)
		return -1;
	int pick = -1;
	bpf_spin_lock(&st->lock);
	for (__u32 i = 1; i <= MAX_REALS; i++) {
		if (i > n)
			break;
		__u32 j = ((__u32)(st->last + (__s32)n) + i) % n & POS_MASK;
		if (svc->weight[j] > 0) {
			st->last = j;
			pick = j;
			break;
		}
	}
	bpf_spin_unlock(&st->lock);
	return pick;
}

/* wrr walks the list lowering the current weight by the gcd at each wrap.
 * After one wrap the largest-weight server always qualifies, so at most
 * 2n steps are needed (internal/sched's loop bound is looser, the walk is
 * the same). */
static __always_inline int sched_wrr(struct service *svc)
{
	__u32 id = svc->id, n = svc->n;
	__s32 mw = svc->max_weight, g = svc->gcd_weight;
	struct sched_state *st = bpf_map_lookup_elem(&sched_states, &id);
	if (!st || n == 0 || n > MAX_REALS || mw <= 0 || g <= 0)
		return -1;
	int pick = -1;
	bpf_spin_lock(&st->lock);
	if (st->cw > mw)
		st->cw = mw;
	__u32 i = st->last < 0 ? n - 1 : (__u32)st->last;
	for (__u32 steps = 0; steps < 2 * MAX_REALS + 1; steps++) {
		if (steps > 2 * n)
			break;
		i = (i + 1) % n & POS_MASK;
		if (i == 0) {
			st->cw -= g;
			if (st->cw <= 0)
				st->cw = mw;
		}
		__u32 w = svc->weight[i];
		if (w > 0 && (__s32)w >= st->cw) {
			pick = i;
			break;
		}
	}
	st->last = i;
	bpf_spin_unlock(&st->lock);
	return pick;
}

/* conns_of reads a position's active and inactive counts: what the program
 * counted less what the Go side expired. -1 if a map has no entry (cannot
 * happen: the index is in range). */
static __always_inline int conns_of(struct service *svc, __u32 pos, __s64 *active, __s64 *inactive)
{
	__u32 idx = svc->id * MAX_REALS + svc->pool[pos & POS_MASK];
	struct real_conns *rc = bpf_map_lookup_elem(&real_conns, &idx);
	struct real_conns *ex = bpf_map_lookup_elem(&real_expired, &idx);
	if (!rc || !ex)
		return -1;
	*active = rc->active - ex->active;
	*inactive = rc->inactive - ex->inactive;
	return 0;
}

/* cost kinds for least_ratio */
#define COST_OVERHEAD 0 /* active*256 + inactive (lc, wlc) */
#define COST_SED 1      /* active + 1 (sed, nq) */

/* The least-ratio walk runs under bpf_loop: the verifier checks its body
 * once instead of once per server and path. */
struct ratio_walk {
	struct service *svc;
	int kind;
	int weighted;
	int best;
	int idle; /* nq: first position with no active connection */
	__s64 best_cost;
	__s64 best_w;
};

static long ratio_step(__u32 i, void *arg)
{
	struct ratio_walk *rw = arg;
	struct service *svc = rw->svc;
	if (i >= MAX_REALS)
		return 1;
	__s64 w = svc->weight[i];
	if (w <= 0)
		return 0;
	__s64 active, inactive;
	if (conns_of(svc, i, &active, &inactive))
		return 0;
	if (active == 0 && rw->idle < 0)
		rw->idle = i;
	__s64 cost = rw->kind == COST_SED ? active + 1 : (active << 8) + inactive;
	if (!rw->weighted)
		w = 1;
	if (rw->best < 0 || rw->best_cost * w > cost * rw->best_w) {
		rw->best = i;
		rw->best_cost = cost;
		rw->best_w = w;
	}
	return 0;
}

/* least_ratio picks the position minimising cost/weight, comparing
 * cost_best*w_i > cost_i*w_best as LVS does; weighted=0 compares the cost
 * alone (lc). nq takes the first idle server before that. */
static __always_inline int least_ratio(struct service *svc, int kind, int weighted, int nq)
{
	struct ratio_walk rw = {.svc = svc, .kind = kind, .weighted = weighted, .best = -1, .idle = -1, .best_w = 1};
	__u32 n = svc->n;
	if (n > MAX_REALS)
		return -1;
	bpf_loop(n, ratio_step, &rw, 0);
	if (nq && rw.idle >= 0)
		return rw.idle;
	return rw.best;
}

/* ip_vs_sh's fold: IPv4 as a number, IPv6 as the XOR of its words. */
static __always_inline __u32 fold_addr(const __u32 *a)
{
	if (a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff))
		return bpf_ntohl(a[3]);
	return bpf_ntohl(a[0]) ^ bpf_ntohl(a[1]) ^ bpf_ntohl(a[2]) ^ bpf_ntohl(a[3]);
}

static __always_inline int sched_sh(struct service *svc, struct packet *p)
{
	__u32 n = svc->n;
	if (n == 0)
		return -1;
	/* the kernel's hash_32 (GOLDEN_RATIO_32) */
	__u32 base = (fold_addr(p->key.src) * 0x61C88647u) >> (32 - SH_BITS);
	for (__u32 off = 0; off < SH_SIZE; off++) {
		__u32 j = svc->sh[(base + off) & (SH_SIZE - 1)];
		if (j < n && svc->weight[j & POS_MASK] > 0)
			return j;
	}
	return -1;
}

/* FNV-1a over the 16 bytes of the source address, as internal/sched's mh. */
static __always_inline int sched_mh(struct service *svc, struct packet *p)
{
	__u32 key = svc->id * 2 + (svc->mh_buf & 1);
	struct mh_table *t = bpf_map_lookup_elem(&mh_tables, &key);
	if (!t)
		return -1;
	const __u8 *b = (const __u8 *)p->key.src;
	__u64 h = 14695981039346656037ULL;
#pragma unroll
	for (int i = 0; i < 16; i++)
		h = (h ^ b[i]) * 1099511628211ULL;
	__u32 e = h % MH_SIZE;
	/* The verifier does not bound a modulo: hide e from the compiler so
	 * that the (always false) check below stays and bounds it. */
	asm volatile("" : "+r"(e));
	if (e >= MH_SIZE)
		return -1;
	__u32 j = t->pos[e];
	if (j >= svc->n || svc->weight[j & POS_MASK] == 0)
		return -1;
	return j;
}

static __always_inline int schedule(struct service *svc, struct packet *p)
{
	switch (svc->sched) {
	case SCHED_RR:
		return sched_rr(svc);
	case SCHED_WRR:
		return sched_wrr(svc);
	case SCHED_LC:
		return least_ratio(svc, COST_OVERHEAD, 0, 0);
	case SCHED_WLC:
		return least_ratio(svc, COST_OVERHEAD, 1, 0);
	case SCHED_SED:
		return least_ratio(svc, COST_SED, 1, 0);
	case SCHED_NQ:
		return least_ratio(svc, COST_SED, 1, 1);
	case SCHED_SH:
		return sched_sh(svc, p);
	case SCHED_MH:
		return sched_mh(svc, p);
	}
	return -1;
}
