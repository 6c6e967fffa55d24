/* DeepSeek-V4 expert parallelism: each rank owns n_local physical expert
 * slots per MoE layer (a contiguous slice at first, EPLB-placed later) and
 * keeps their weights in its own packed buffers; every rank routes its own
 * rows (attention data parallelism), and per layer
 *
 *   counts   alltoall: rows and (row, expert) entries this rank sends each peer
 *   dispatch alltoallv: entry metadata (row in message, slot, weight), then
 *            each row's h once per destination rank (D floats), however
 *            many of its experts live there
 *   compute  each local slot runs on the rows that chose it
 *   combine  alltoallv, back in entry order: for a row's leading run of
 *            experts on one owner (k = 0..j-1) their weighted sum, computed
 *            by the owner from 0 in k order; every later expert's output
 *
 * The row's weighted sum then goes on from that partial in the same
 * ascending-expert order the one-process forward uses (dsv4_moe_mac on both
 * sides), and the expert linears are batch invariant (a row's result does
 * not depend on its neighbours), so the output is bit-identical to one
 * process, whatever the placement and whichever replica a row uses. With
 * top-2 this is the routing's minimum (one row back per remote owner); with
 * top-k a later run on one owner still comes back entry by entry, since
 * summing it there would change the order of the additions. A rank with no rows still
 * makes every call with zero counts (a placeholder step), so the
 * collectives never wait on an idle rank.
 *
 * EPLB: per-layer logical expert counts of this rank's rows go into a
 * window ring each forward; every `interval` forwards (the first after
 * interval/4, as DeepInfer) the windows are summed over ranks, eplb.c
 * computes the new replication and placement (the same on every rank: same
 * input, same code), and slot weights move between ranks by point-to-point
 * transfers of the packed bytes (a local copy when the rank already has the
 * expert). Weights are moved, never recomputed, so nothing changes a bit. */
#include "model/deepseek_v4_internal.h"

#include "base/alloc.h"
#include "dist/dist.h"
#include "dist/eplb.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALIGN_BYTES 64          /* packed sections start on a cache line (di_matmul rows) */
#define DEFAULT_WINDOW 100      /* DEEPINFER_EXPERT_COUNT_WINDOW_SIZE */
#define META_INTS 3             /* (row in message, local slot | PREFIX_BIT, weight bits) per entry */
#define PREFIX_BIT (1 << 30)    /* entry of its row's leading run on one rank (slots < 2^30) */

/* Where the three linears of one expert sit in a packed slot. */
typedef struct lin_layout {
    int64_t off_data, off_scale, off_mx; /* -1 when absent */
    int64_t data_bytes, scale_floats, mx_bytes;
    int64_t scale_row0;                  /* FP8: first scale row copied */
} lin_layout;

struct di_dsv4_ep {
    dsv4_ep_experts x;                   /* the model's experts; w1/w2/w3 point into tabs */
    const dsv4_linear **tabs;            /* (3, L) copies of the caller's per-layer tables */
    di_dist *d;
    di_dsv4_ep_params p;
    int32_t E, P, n_local, R1, L, K, D;
    int32_t *p2l, *l2p, *lcount;         /* (L, P), (L, E, R1), (L, E) */
    lin_layout *lay;                     /* (L, 3) */
    int64_t *slot_bytes;                 /* (L) packed bytes of one slot */
    uint8_t **blob;                      /* (L) -> (n_local, slot_bytes) this rank's slots */
    dsv4_linear *w;                      /* (L, n_local, 3) views into blob */
    di_eplb_window win;
    int64_t n_forward, until_rebalance;
    /* per-forward scratch, grown on demand */
    int64_t cap_ent, cap_rows_s, cap_ent_r, cap_rows_r;
    int32_t *ent_dest, *ent_slot, *ent_row_msg; /* (n*K); ent_row_msg: its unit back */
    int32_t *plen;                       /* (n) leading experts summed by their owner */
    float *partial;                      /* (n, D) their weighted sum, from the owner */
    int64_t *ucnt_s, *ucnt_r;            /* (ranks) units back from / to each peer */
    float *unit_r;                       /* (entries recv, D) units this rank returns */
    int32_t *row_seen;                   /* (P ranks) last row sent to each rank */
    int64_t *cnt_s, *cnt_r, *b_s, *b_r;  /* (ranks*2), (ranks*2), (ranks), (ranks) */
    int32_t *meta_s, *meta_r;            /* (entries, 2) */
    float *rows_s, *rows_r;              /* (rows, D) */
    float *out_r, *out_s;                /* (entries, D) */
    int32_t *gidx;                       /* (entries recv) */
    float *xg, *g1, *g3, *yg;            /* expert scratch (entries recv, D or F) */
    float *wg;                           /* (entries recv) their routing weights */
    float *mm;                           /* matmul scratch for the received rows */
    int64_t cap_mm;
    /* load since the last di_dsv4_ep_measure_lb: (forwards, L) entries received */
    int64_t *lb_loads;
    int64_t n_lb, cap_lb;
    di_dsv4_ep_stats st;
};

static int64_t align_up(int64_t x) { return (x + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES; }

static lin_layout layout_of_linear(const dsv4_linear *w, int64_t *off) {
    lin_layout l = {.off_data = -1, .off_scale = -1, .off_mx = -1};
    l.data_bytes = (int64_t)w->row_bytes * w->n_out;
    l.off_data = *off;
    *off = align_up(*off + l.data_bytes);
    if (w->kind == DSV4_W_FP8) {
        l.scale_row0 = w->row_off / w->block;
        int64_t rows = (w->row_off % w->block + w->n_out + w->block - 1) / w->block;
        l.scale_floats = rows * w->scale_cols;
        l.off_scale = *off;
        *off = align_up(*off + l.scale_floats * (int64_t)sizeof(float));
    } else if (w->kind == DSV4_W_MXFP4) {
        l.mx_bytes = w->n_out * (w->n_in / 32);
        l.off_mx = *off;
        *off = align_up(*off + l.mx_bytes);
    }
    return l;
}

static int same_shape(const dsv4_linear *a, const dsv4_linear *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->n_in == b->n_in && a->n_out == b->n_out &&
           a->row_bytes == b->row_bytes && a->scale_cols == b->scale_cols && a->block == b->block &&
           (a->kind != DSV4_W_FP8 || a->row_off % a->block == b->row_off % b->block);
}

static void pack_linear(const dsv4_linear *w, const lin_layout *l, uint8_t *slot) {
    memcpy(slot + l->off_data, w->data, (size_t)l->data_bytes);
    if (l->off_scale >= 0)
        memcpy(slot + l->off_scale, w->scale + l->scale_row0 * w->scale_cols, (size_t)l->scale_floats * sizeof(float));
    if (l->off_mx >= 0) memcpy(slot + l->off_mx, w->mx_scale, (size_t)l->mx_bytes);
}

/* Once a rank has packed an expert it never reads the checkpoint's copy
 * again: hint the kernel to drop those mapped pages from this process
 * (MADV_PAGEOUT keeps the contents of anything not file-backed, so it is
 * safe on any memory), so a rank's resident set is its own slice, not its
 * slice twice. A hint: failures are ignored. */
static void release_source(const dsv4_linear *w) {
#ifdef MADV_PAGEOUT
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t a = (uintptr_t)w->data, e = a + (uintptr_t)w->row_bytes * (uintptr_t)w->n_out;
    a = (a + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    e = e / (uintptr_t)pg * (uintptr_t)pg;
    if (e > a) (void)madvise((void *)a, e - a, MADV_PAGEOUT);
#else
    (void)w;
#endif
}

/* A view of a packed linear: the template's shape, the slot's bytes. */
static dsv4_linear view_linear(const dsv4_linear *tmpl, const lin_layout *l, uint8_t *slot) {
    dsv4_linear v = *tmpl;
    v.data = slot + l->off_data;
    if (l->off_scale >= 0) {
        v.scale = (const float *)(slot + l->off_scale);
        v.row_off = tmpl->row_off % tmpl->block;
    }
    if (l->off_mx >= 0) v.mx_scale = slot + l->off_mx;
    return v;
}

/* Linear j (0 = w1, 1 = w2, 2 = w3) of expert e in layer l. */
static const dsv4_linear *expert_linear(const dsv4_ep_experts *x, int32_t l, int32_t e, int j) {
    return j == 0 ? &x->w1[l][e] : j == 1 ? &x->w2[l][e] : &x->w3[l][e];
}

static void rebuild_views(di_dsv4_ep *ep, int32_t l) {
    for (int32_t s = 0; s < ep->n_local; s++)
        for (int j = 0; j < 3; j++)
            ep->w[((int64_t)l * ep->n_local + s) * 3 + j] = view_linear(
                expert_linear(&ep->x, l, 0, j), &ep->lay[l * 3 + j], ep->blob[l] + s * ep->slot_bytes[l]);
}

static uint8_t *alloc_slots(int64_t n_local, int64_t slot_bytes) {
    size_t bytes = (size_t)align_up(n_local * slot_bytes > 0 ? n_local * slot_bytes : ALIGN_BYTES);
    return aligned_alloc(ALIGN_BYTES, bytes);
}

di_status dsv4_ep_create(const dsv4_ep_experts *x, di_dist *d, const di_dsv4_ep_params *p, di_dsv4_ep **out,
                         di_error *err) {
    *out = NULL;
    if (p->n_extra < 0 || p->window < 0 || p->interval < 0 || (p->force_imbalance != 0 && p->force_imbalance < 1))
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "ep: extra experts %d, window %d, interval %d, force imbalance %g (>= 1 or 0)",
                            (int)p->n_extra, (int)p->window, (int)p->interval, p->force_imbalance);
    di_dsv4_ep *ep = di_calloc(1, sizeof *ep);
    if (!ep) return di_error_set(err, DI_ERR_NOMEM, "ep: out of memory");
    ep->x = *x;
    ep->d = d;
    const int32_t nl = x->n_layers > 0 ? x->n_layers : 1;
    if (!(ep->tabs = di_malloc_array((size_t)3 * nl, sizeof *ep->tabs))) {
        free(ep);
        return di_error_set(err, DI_ERR_NOMEM, "ep: out of memory");
    }
    for (int32_t l = 0; l < x->n_layers; l++) {
        ep->tabs[l] = x->w1[l];
        ep->tabs[nl + l] = x->w2[l];
        ep->tabs[2 * nl + l] = x->w3[l];
    }
    ep->x.w1 = ep->tabs;
    ep->x.w2 = ep->tabs + nl;
    ep->x.w3 = ep->tabs + 2 * nl;
    ep->p = *p;
    if (!ep->p.window) ep->p.window = DEFAULT_WINDOW;
    if (ep->p.interval && ep->p.window > ep->p.interval) ep->p.window = ep->p.interval;
    ep->E = x->n_experts;
    ep->K = x->n_used;
    ep->D = x->n_embd;
    ep->L = x->n_layers;
    /* DeepInfer's resolve_num_extra_experts: at least n_extra, rounded up so
     * the slots split evenly over the ranks */
    int32_t extra = p->n_extra + (int32_t)((d->size - (ep->E + p->n_extra) % d->size) % d->size);
    ep->P = ep->E + extra;
    ep->n_local = ep->P / d->size;
    ep->R1 = extra + 1;
    di_status s = DI_OK;
    /* every rank must run the same model and layout */
    int64_t facts[4] = {ep->E, ep->L, ep->D, ep->P}, lo[4];
    memcpy(lo, facts, sizeof facts);
    if ((s = di_dist_allreduce_i64(d, facts, 4, DI_DIST_MAX, err)) ||
        (s = di_dist_allreduce_i64(d, lo, 4, DI_DIST_MIN, err)))
        goto fail;
    if (memcmp(facts, lo, sizeof facts)) {
        s = di_error_set(err, DI_ERR_INVALID_ARG, "ep: the ranks loaded different models or expert counts");
        goto fail;
    }
    const int32_t Lr = ep->L, P = ep->P, E = ep->E;
    ep->p2l = di_malloc_array((size_t)Lr * P, sizeof(int32_t));
    ep->l2p = di_malloc_array((size_t)Lr * E * ep->R1, sizeof(int32_t));
    ep->lcount = di_malloc_array((size_t)Lr * E, sizeof(int32_t));
    ep->lay = di_calloc((size_t)Lr * 3, sizeof *ep->lay);
    ep->slot_bytes = di_calloc((size_t)Lr, sizeof(int64_t));
    ep->blob = di_calloc((size_t)Lr, sizeof *ep->blob);
    ep->w = di_calloc((size_t)Lr * ep->n_local * 3, sizeof *ep->w);
    ep->row_seen = di_malloc_array((size_t)d->size, sizeof(int32_t));
    ep->cnt_s = di_malloc_array((size_t)d->size * 6, sizeof(int64_t));
    ep->ucnt_s = di_malloc_array((size_t)d->size * 2, sizeof(int64_t));
    if (!ep->p2l || !ep->l2p || !ep->lcount || !ep->lay || !ep->slot_bytes || !ep->blob || !ep->w ||
        !ep->row_seen || !ep->cnt_s || !ep->ucnt_s) {
        s = di_error_set(err, DI_ERR_NOMEM, "ep: out of memory");
        goto fail;
    }
    ep->cnt_r = ep->cnt_s + 2 * d->size;
    ep->b_s = ep->cnt_s + 4 * d->size;
    ep->b_r = ep->cnt_s + 5 * d->size;
    ep->ucnt_r = ep->ucnt_s + d->size;
    di_eplb_initial(Lr, E, P, ep->p2l, ep->l2p, ep->lcount);
    if ((s = di_eplb_window_init(&ep->win, ep->p.window, Lr, E, err))) goto fail;
    for (int32_t l = 0; l < Lr; l++) {
        int64_t off = 0;
        for (int j = 0; j < 3; j++) ep->lay[l * 3 + j] = layout_of_linear(expert_linear(x, l, 0, j), &off);
        ep->slot_bytes[l] = off;
        for (int32_t e = 1; e < E; e++)
            for (int j = 0; j < 3; j++)
                if (!same_shape(expert_linear(x, l, 0, j), expert_linear(x, l, e, j))) {
                    s = di_error_set(err, DI_ERR_UNSUPPORTED, "ep: layer %d: experts 0 and %d differ in layout",
                                     (int)l, (int)e);
                    goto fail;
                }
        if (!(ep->blob[l] = alloc_slots(ep->n_local, off))) {
            s = di_error_set(err, DI_ERR_NOMEM, "ep: out of memory for layer %d's experts", (int)l);
            goto fail;
        }
        for (int32_t sl = 0; sl < ep->n_local; sl++) {
            int32_t e = ep->p2l[(int64_t)l * P + d->rank * ep->n_local + sl];
            for (int j = 0; j < 3; j++) {
                pack_linear(expert_linear(x, l, e, j), &ep->lay[l * 3 + j], ep->blob[l] + sl * off);
                release_source(expert_linear(x, l, e, j));
            }
        }
        rebuild_views(ep, l);
    }
    if (ep->p.interval) {
        int32_t first = ep->p.interval / 4 > 1 ? ep->p.interval / 4 : 1;
        ep->until_rebalance = first;
    }
    *out = ep;
    return DI_OK;
fail:
    di_dsv4_ep_free(ep);
    return s;
}

void di_dsv4_ep_free(di_dsv4_ep *ep) {
    if (!ep) return;
    for (int32_t l = 0; ep->blob && l < ep->L; l++) free(ep->blob[l]);
    void *ps[] = {ep->p2l, ep->l2p, ep->lcount, ep->lay, ep->slot_bytes, ep->blob, ep->w, ep->row_seen,
                  ep->cnt_s, ep->ent_dest, ep->ent_slot, ep->ent_row_msg, ep->meta_s, ep->meta_r, ep->rows_s,
                  ep->rows_r, ep->out_r, ep->out_s, ep->gidx, ep->xg, ep->g1, ep->g3, ep->yg, ep->lb_loads, ep->mm,
                  ep->plen, ep->partial, ep->ucnt_s, ep->unit_r, ep->wg, (void *)ep->tabs};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) free(ps[i]);
    di_eplb_window_free(&ep->win);
    free(ep);
}

double dsv4_ep_skew(const di_dsv4_ep *ep, int32_t *groups) {
    *groups = ep->d->size;
    return ep->p.force_imbalance >= 1 ? ep->p.force_imbalance : 0.0;
}

void di_dsv4_ep_get_stats(const di_dsv4_ep *ep, di_dsv4_ep_stats *out) {
    *out = ep->st;
    out->n_physical = ep->P;
    out->n_local = ep->n_local;
}

const int32_t *di_dsv4_ep_placement(const di_dsv4_ep *ep, int32_t layer) {
    return ep->p2l + (int64_t)layer * ep->P;
}

int32_t di_dsv4_ep_window(const di_dsv4_ep *ep, int64_t *out) {
    return out ? di_eplb_window_copy(&ep->win, out) : ep->win.n_filled;
}

static int grow(void *pp, int64_t *cap, int64_t n, size_t size) {
    if (n <= *cap) return 1;
    void **p = pp;
    int64_t c = n > 2 * *cap ? n : 2 * *cap;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static di_status reserve(di_dsv4_ep *ep, int64_t n_ent, int64_t n_rows_s, di_error *err) {
    const int64_t D = ep->D;
    int64_t c1 = ep->cap_ent, c2 = ep->cap_ent, c3 = ep->cap_ent, c4 = ep->cap_ent, c5 = ep->cap_ent;
    int ok = grow(&ep->ent_dest, &c1, n_ent, sizeof(int32_t)) && grow(&ep->ent_slot, &c2, n_ent, sizeof(int32_t)) &&
             grow(&ep->ent_row_msg, &c3, n_ent, sizeof(int32_t)) &&
             grow(&ep->meta_s, &c4, n_ent, META_INTS * sizeof(int32_t)) &&
             grow(&ep->out_s, &c5, n_ent, (size_t)D * sizeof(float));
    if (ok) ep->cap_ent = c1 < c5 ? c1 : c5;
    int64_t r1 = ep->cap_rows_s, r2 = ep->cap_rows_s;
    ok = ok && grow(&ep->plen, &r1, n_rows_s, sizeof(int32_t)) &&
         grow(&ep->partial, &r2, n_rows_s, (size_t)D * sizeof(float)) &&
         grow(&ep->rows_s, &ep->cap_rows_s, n_rows_s, (size_t)D * sizeof(float));
    return ok ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "ep: out of memory for %lld entries", (long long)n_ent);
}

static di_status reserve_recv(di_dsv4_ep *ep, int64_t n_ent, int64_t n_rows, int n_threads, di_error *err) {
    const int64_t D = ep->D, F = ep->x.moe_ff;
    int64_t mm = dsv4_linear_scratch_floats(n_ent, D > F ? D : F, n_threads, n_threads);
    if (!grow(&ep->mm, &ep->cap_mm, mm, sizeof(float)))
        return di_error_set(err, DI_ERR_NOMEM, "ep: out of memory for matmul scratch");
    int64_t a = ep->cap_ent_r, b = ep->cap_ent_r, c = ep->cap_ent_r, d1 = ep->cap_ent_r, e1 = ep->cap_ent_r,
            f1 = ep->cap_ent_r, g = ep->cap_ent_r;
    int ok = grow(&ep->meta_r, &a, n_ent, META_INTS * sizeof(int32_t)) &&
             grow(&ep->out_r, &b, n_ent, (size_t)D * sizeof(float)) && grow(&ep->gidx, &c, n_ent, sizeof(int32_t)) &&
             grow(&ep->xg, &d1, n_ent, (size_t)D * sizeof(float)) && grow(&ep->g1, &e1, n_ent, (size_t)F * sizeof(float)) &&
             grow(&ep->g3, &f1, n_ent, (size_t)F * sizeof(float)) && grow(&ep->yg, &g, n_ent, (size_t)D * sizeof(float));
    int64_t h = ep->cap_ent_r, i1 = ep->cap_ent_r;
    ok = ok && grow(&ep->unit_r, &h, n_ent, (size_t)D * sizeof(float)) && grow(&ep->wg, &i1, n_ent, sizeof(float));
    if (ok) ep->cap_ent_r = a < h ? a : h;
    ok = ok && grow(&ep->rows_r, &ep->cap_rows_r, n_rows, (size_t)D * sizeof(float));
    return ok ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "ep: out of memory for %lld received entries", (long long)n_ent);
}

di_status dsv4_ep_routed(di_dsv4_ep *ep, dsv4_ep_layer *io, di_threadpool *pool, di_error *err) {
    di_dist *d = ep->d;
    const int32_t il = io->layer;
    const int64_t n = io->n;
    const int32_t K = ep->K, D = ep->D, P = ep->P, NL = ep->n_local, R = d->size, E = ep->E;
    const int32_t *l2p = ep->l2p + (int64_t)il * E * ep->R1, *lcnt = ep->lcount + (int64_t)il * E;
    di_status s = reserve(ep, n * K, n * K, err);
    if (s) return s;
    /* plan: each entry's owner rank and slot; rows once per destination */
    int64_t *cnt_s = ep->cnt_s, *cnt_r = ep->cnt_r; /* (R, 2): rows, entries */
    memset(cnt_s, 0, (size_t)R * 2 * sizeof *cnt_s);
    for (int64_t i = 0; i < n * K; i++) {
        int32_t e = io->sel[i];
        ep->win.current[(int64_t)il * E + e]++;
        int32_t r = (int32_t)(i / K);
        int32_t phys = l2p[(int64_t)e * ep->R1 + (r + (int32_t)(i % K)) % lcnt[e]];
        ep->ent_dest[i] = phys / NL;
        ep->ent_slot[i] = phys % NL;
        cnt_s[ep->ent_dest[i] * 2 + 1]++;
    }
    /* a row's leading experts that share one owner come back as one
     * weighted sum, which the owner computes in the same order the
     * one-process sum would (dsv4_moe_mac from 0): the rest one by one */
    memset(ep->ucnt_s, 0, (size_t)R * sizeof *ep->ucnt_s);
    for (int64_t r = 0; r < n; r++) {
        int32_t j = 1;
        while (j < K && ep->ent_dest[r * K + j] == ep->ent_dest[r * K]) j++;
        ep->plen[r] = K > 0 ? j : 0;
        for (int32_t k = 0; k < K; k++)
            if (k == 0 || k >= j) ep->ucnt_s[ep->ent_dest[r * K + k]]++;
    }
    for (int32_t q = 0; q < R; q++) ep->row_seen[q] = -1;
    /* offsets of each destination's rows and entries in the send buffers */
    int64_t *row_off = ep->b_s, *ent_off = ep->b_r;
    for (int64_t r = 0; r < n; r++)
        for (int32_t k = 0; k < K; k++) {
            int32_t q = ep->ent_dest[r * K + k];
            if (ep->row_seen[q] != (int32_t)r) {
                ep->row_seen[q] = (int32_t)r;
                cnt_s[q * 2]++;
            }
        }
    int64_t ro = 0, eo = 0, uo = 0;
    int64_t *unit_off = ep->ucnt_r; /* scratch until the owner side needs it */
    for (int32_t q = 0; q < R; q++) {
        row_off[q] = ro;
        ent_off[q] = eo;
        unit_off[q] = uo;
        ro += cnt_s[q * 2];
        eo += cnt_s[q * 2 + 1];
        uo += ep->ucnt_s[q];
    }
    for (int32_t q = 0; q < R; q++) ep->row_seen[q] = -1;
    int64_t min_bytes = 0;
    for (int64_t r = 0; r < n; r++)
        for (int32_t k = 0; k < K; k++) {
            int64_t i = r * K + k;
            int32_t q = ep->ent_dest[i];
            if (ep->row_seen[q] != (int32_t)r) { /* first entry of row r for q: send h once */
                ep->row_seen[q] = (int32_t)r;
                memcpy(ep->rows_s + row_off[q] * D, io->x + r * D, (size_t)D * sizeof(float));
                row_off[q]++;
                if (q != d->rank) min_bytes += 2 * (int64_t)D * (int64_t)sizeof(float);
            }
            int prefix = k < ep->plen[r];
            if (k == 0 || !prefix) ep->ent_row_msg[i] = (int32_t)unit_off[q]++; /* where it comes back */
            else ep->ent_row_msg[i] = ep->ent_row_msg[r * K];
            int32_t *mt = ep->meta_s + ent_off[q] * META_INTS;
            mt[0] = (int32_t)(row_off[q] - 1);
            mt[1] = ep->ent_slot[i] | (prefix ? PREFIX_BIT : 0);
            memcpy(&mt[2], &io->selw[i], sizeof(float));
            ent_off[q]++;
        }
    /* meta row index is relative to q's message */
    ro = 0;
    eo = 0;
    for (int32_t q = 0; q < R; q++) {
        for (int64_t j = eo; j < eo + cnt_s[q * 2 + 1]; j++) ep->meta_s[j * META_INTS] -= (int32_t)ro;
        ro += cnt_s[q * 2];
        eo += cnt_s[q * 2 + 1];
    }
    /* counts, then metadata and rows */
    int64_t *sb = ep->b_s, *rb = ep->b_r;
    int64_t before = d->bytes_sent;
    for (int32_t q = 0; q < R; q++) sb[q] = 2 * (int64_t)sizeof(int64_t);
    if ((s = di_dist_alltoallv(d, cnt_s, sb, cnt_r, sb, err))) return s;
    int64_t n_rows_r = 0, n_ent_r = 0;
    for (int32_t q = 0; q < R; q++) {
        n_rows_r += cnt_r[q * 2];
        n_ent_r += cnt_r[q * 2 + 1];
    }
    if ((s = reserve_recv(ep, n_ent_r, n_rows_r, di_threadpool_n_threads(pool), err))) return s;
    for (int32_t q = 0; q < R; q++) {
        sb[q] = cnt_s[q * 2 + 1] * META_INTS * (int64_t)sizeof(int32_t);
        rb[q] = cnt_r[q * 2 + 1] * META_INTS * (int64_t)sizeof(int32_t);
    }
    if ((s = di_dist_alltoallv(d, ep->meta_s, sb, ep->meta_r, rb, err))) return s;
    for (int32_t q = 0; q < R; q++) {
        sb[q] = cnt_s[q * 2] * D * (int64_t)sizeof(float);
        rb[q] = cnt_r[q * 2] * D * (int64_t)sizeof(float);
    }
    if ((s = di_dist_alltoallv(d, ep->rows_s, sb, ep->rows_r, rb, err))) return s;
    /* received entries: make their row indices global in rows_r */
    ro = 0;
    eo = 0;
    for (int32_t q = 0; q < R; q++) {
        for (int64_t j = eo; j < eo + cnt_r[q * 2 + 1]; j++) ep->meta_r[j * META_INTS] += (int32_t)ro;
        ro += cnt_r[q * 2];
        eo += cnt_r[q * 2 + 1];
    }
    /* each local slot on the entries that chose it, in received order */
    for (int32_t sl = 0; sl < NL; sl++) {
        int64_t cnt = 0;
        for (int64_t j = 0; j < n_ent_r; j++)
            if ((ep->meta_r[j * META_INTS + 1] & ~PREFIX_BIT) == sl) {
                ep->gidx[cnt] = (int32_t)j;
                memcpy(&ep->wg[cnt], &ep->meta_r[j * META_INTS + 2], sizeof(float));
                memcpy(ep->xg + cnt * D, ep->rows_r + (int64_t)ep->meta_r[j * META_INTS] * D, (size_t)D * sizeof(float));
                cnt++;
            }
        if (!cnt) continue;
        const dsv4_linear *w = ep->w + ((int64_t)il * NL + sl) * 3;
        dsv4_ep_scratch sc = {ep->g1, ep->g3, ep->mm};
        io->expert(io->user, w, ep->xg, ep->wg, cnt, ep->yg, &sc, pool);
        for (int64_t j = 0; j < cnt; j++)
            memcpy(ep->out_r + (int64_t)ep->gidx[j] * D, ep->yg + j * D, (size_t)D * sizeof(float));
    }
    /* combine: per source, in its entry order, one unit per leading run
     * (its weighted sum from 0, as the one-process loop) or per other entry */
    int64_t nu = 0;
    eo = 0;
    for (int32_t q = 0; q < R; q++) {
        int64_t u0 = nu;
        for (int64_t j = eo; j < eo + cnt_r[q * 2 + 1]; j++) {
            const int32_t *mt = ep->meta_r + j * META_INTS;
            const float *y = ep->out_r + j * D;
            if (!(mt[1] & PREFIX_BIT)) {
                memcpy(ep->unit_r + nu++ * D, y, (size_t)D * sizeof(float));
                continue;
            }
            int joins = j > eo && (mt[-META_INTS + 1] & PREFIX_BIT) && mt[-META_INTS] == mt[0];
            float w, *acc = ep->unit_r + (joins ? nu - 1 : nu) * D;
            memcpy(&w, &mt[2], sizeof w);
            if (!joins) {
                for (int32_t dd = 0; dd < D; dd++) acc[dd] = 0.0f;
                nu++;
            }
            for (int32_t dd = 0; dd < D; dd++) acc[dd] = io->mac(acc[dd], y[dd], w);
        }
        ep->ucnt_r[q] = nu - u0;
        eo += cnt_r[q * 2 + 1];
    }
    for (int32_t q = 0; q < R; q++) {
        sb[q] = ep->ucnt_r[q] * D * (int64_t)sizeof(float);
        rb[q] = ep->ucnt_s[q] * D * (int64_t)sizeof(float);
    }
    if ((s = di_dist_alltoallv(d, ep->unit_r, sb, ep->out_s, rb, err))) return s;
    for (int64_t r = 0; r < n; r++) {
        if (ep->plen[r])
            memcpy(ep->partial + r * D, ep->out_s + (int64_t)ep->ent_row_msg[r * K] * D, (size_t)D * sizeof(float));
        for (int32_t k = ep->plen[r]; k < K; k++)
            memcpy(io->ysel + (r * K + k) * D, ep->out_s + (int64_t)ep->ent_row_msg[r * K + k] * D,
                   (size_t)D * sizeof(float));
    }
    io->plen = ep->plen;
    io->partial = ep->partial;
    /* statistics: this rank's load, bytes moved vs the routing's minimum
     * (each row to each distinct remote rank once and one D-row back) */
    ep->st.bytes_sent += d->bytes_sent - before;
    for (int32_t q = 0; q < R; q++) {
        if (q == d->rank) continue;
        ep->st.bytes_counts += 2 * (int64_t)sizeof(int64_t);
        ep->st.bytes_meta += cnt_s[q * 2 + 1] * META_INTS * (int64_t)sizeof(int32_t);
        ep->st.bytes_rows += cnt_s[q * 2] * D * (int64_t)sizeof(float);
        ep->st.bytes_combine += ep->ucnt_r[q] * D * (int64_t)sizeof(float);
    }
    ep->st.bytes_min += min_bytes;
    ep->st.n_row_layers += n;
    if (grow(&ep->lb_loads, &ep->cap_lb, (ep->n_lb + 1) * ep->L, sizeof(int64_t))) {
        if (il == 0) {
            for (int32_t l = 0; l < ep->L; l++) ep->lb_loads[ep->n_lb * ep->L + l] = 0;
            ep->n_lb++;
        }
        ep->lb_loads[(ep->n_lb - 1) * ep->L + il] = n_ent_r;
    }
    (void)P;
    return DI_OK;
}

/* ---- EPLB: rebalance while serving --------------------------------------- */

di_status di_dsv4_ep_measure_lb(di_dsv4_ep *ep, double *moe_lb, di_error *err) {
    int64_t n = ep->n_lb;
    di_status s = di_dist_allreduce_i64(ep->d, &n, 1, DI_DIST_MIN, err);
    if (s) return s;
    int64_t cnt = n * ep->L;
    int64_t *mx = di_malloc_array((size_t)(2 * cnt + 1), sizeof *mx), *sm = mx + cnt;
    if (!mx) return di_error_set(err, DI_ERR_NOMEM, "ep: out of memory");
    memcpy(mx, ep->lb_loads, (size_t)cnt * sizeof *mx);
    memcpy(sm, ep->lb_loads, (size_t)cnt * sizeof *sm);
    if (cnt && ((s = di_dist_allreduce_i64(ep->d, mx, (int32_t)cnt, DI_DIST_MAX, err)) ||
                (s = di_dist_allreduce_i64(ep->d, sm, (int32_t)cnt, DI_DIST_SUM, err)))) {
        free(mx);
        return s;
    }
    double smax = 0.0, smean = 0.0;
    for (int64_t i = 0; i < cnt; i++) {
        smax += (double)mx[i];
        smean += (double)sm[i] / ep->d->size;
    }
    *moe_lb = smean > 0.0 ? smax / smean : 1.0;
    free(mx);
    ep->n_lb = 0;
    return DI_OK;
}

di_status di_dsv4_ep_rebalance(di_dsv4_ep *ep, di_error *err) {
    di_dist *d = ep->d;
    const int32_t L = ep->L, E = ep->E, P = ep->P, NL = ep->n_local, me = d->rank;
    const int64_t per = (int64_t)L * E;
    int32_t S = ep->win.n_filled;
    if ((int64_t)S * per > INT32_MAX) return di_error_set(err, DI_ERR_RANGE, "ep: EPLB window too large");
    int64_t *tok = di_malloc_array((size_t)(S > 0 ? S : 1) * (size_t)per, sizeof *tok);
    int32_t *p2l = di_malloc_array((size_t)L * P, sizeof *p2l), *l2p = di_malloc_array((size_t)L * E * ep->R1, 4),
            *lc = di_malloc_array((size_t)L * E, 4);
    uint8_t **nb = di_calloc((size_t)L, sizeof *nb);
    di_dist_msg *msgs = di_malloc_array((size_t)2 * P + 1, sizeof *msgs);
    di_status s = DI_OK;
    if (!tok || !p2l || !l2p || !lc || !nb || !msgs) {
        s = di_error_set(err, DI_ERR_NOMEM, "ep: out of memory for a rebalance");
        goto done;
    }
    di_eplb_window_copy(&ep->win, tok);
    if (S == 0 || (s = di_dist_allreduce_i64(d, tok, (int32_t)(S * per), DI_DIST_SUM, err))) goto done;
    if ((s = di_eplb_rebalance(tok, S, L, E, P, NL, p2l, l2p, lc, err))) goto done;
    double lb0 = di_eplb_moe_lb(tok, S, L, E, P, NL, ep->p2l, ep->lcount);
    double lb1 = di_eplb_moe_lb(tok, S, L, E, P, NL, p2l, lc);
    /* move the weights, one layer at a time (one layer's new slots extra) */
    int64_t moved = 0;
    for (int32_t l = 0; l < L && !s; l++) {
        const int32_t *old = ep->p2l + (int64_t)l * P, *neu = p2l + (int64_t)l * P;
        const int64_t sb = ep->slot_bytes[l];
        if (!(nb[l] = alloc_slots(NL, sb))) {
            s = di_error_set(err, DI_ERR_NOMEM, "ep: out of memory for layer %d's new slots", (int)l);
            break;
        }
        int32_t n_msgs = 0;
        for (int32_t g = 0; g < P; g++) { /* new slot g on rank g / NL gets logical neu[g] */
            int32_t dst = g / NL, e = neu[g], have = -1, src = -1;
            for (int32_t j = 0; j < NL; j++)
                if (old[dst * NL + j] == e) have = j;
            if (have < 0)
                for (int32_t h = 0; h < P && src < 0; h++)
                    if (old[h] == e) src = h;
            if (dst == me) {
                if (have >= 0)
                    memcpy(nb[l] + (g % NL) * sb, ep->blob[l] + have * sb, (size_t)sb);
                else
                    msgs[n_msgs++] = (di_dist_msg){src / NL, 0, nb[l] + (g % NL) * sb, sb, g};
            } else if (have < 0 && src / NL == me) {
                msgs[n_msgs++] = (di_dist_msg){dst, 1, ep->blob[l] + (src % NL) * sb, sb, g};
                moved += sb;
            }
        }
        s = di_dist_p2p(d, msgs, n_msgs, err);
    }
    if (!s) {
        for (int32_t l = 0; l < L; l++) {
            free(ep->blob[l]);
            ep->blob[l] = nb[l];
            nb[l] = NULL;
        }
        memcpy(ep->p2l, p2l, (size_t)L * P * sizeof *p2l);
        memcpy(ep->l2p, l2p, (size_t)L * E * ep->R1 * sizeof *l2p);
        memcpy(ep->lcount, lc, (size_t)L * E * sizeof *lc);
        for (int32_t l = 0; l < L; l++) rebuild_views(ep, l);
        ep->st.n_rebalances++;
        ep->st.moe_lb_before = lb0;
        ep->st.moe_lb_after = lb1;
        ep->st.weight_bytes_moved += moved;
        if (ep->p.log && me == 0)
            fprintf(stderr, "[EPLB] rearranged: %d ranks, %d slots/rank (%d redundant), window %d steps: "
                            "moe_lb %.4f -> %.4f\n", (int)d->size, (int)NL, (int)(P - E), (int)S, lb0, lb1);
    }
done:
    if (nb)
        for (int32_t l = 0; l < L; l++) free(nb[l]);
    free(nb);
    free(tok);
    free(p2l);
    free(l2p);
    free(lc);
    free(msgs);
    return s;
}

di_status dsv4_ep_after_forward(di_dsv4_ep *ep, di_error *err) {
    di_eplb_window_push(&ep->win);
    ep->n_forward++;
    if (!ep->p.interval || --ep->until_rebalance > 0) return DI_OK;
    ep->until_rebalance = ep->p.interval;
    return di_dsv4_ep_rebalance(ep, err);
}
