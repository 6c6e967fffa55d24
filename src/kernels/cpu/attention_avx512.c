/* AVX-512 attention run: the same unit of work as attention.c (rows
 * r0..r0+n-1 of one sequence, one KV head), with the online softmax taken
 * one STEP at a time (di_attention_step_keys: whole KV blocks, >= 64 keys)
 * and the arithmetic laid out for 16-lane registers.
 *
 * Per step:
 *  - K is widened (f16) and transposed once into kt (chunks of 16 keys:
 *    kt[c][i][lane] = K[16c + lane][i], zero past the loaded keys), so the
 *    scores of 16 keys are ONE chain of head_dim FMAs, s = fma(q[i], kt[i], s)
 *    for i = 0..hd-1, with q[i] broadcast: no horizontal sums. Tiles of
 *    TILE_PAIRS (row, head) pairs x TILE_CHUNKS chunks run as 16
 *    independent chains that share the kt and q loads (hides the FMA
 *    latency). V is widened once into vbuf.
 *  - max (in raw score units; scale > 0 commutes with it), exp and sum run
 *    on 16 lanes; p = e^(fma(s, scale, -m*scale)) with di_exp_nonpos's
 *    polynomial, instruction for instruction; lanes past the row's valid
 *    keys (its last chunk only) are left out of the max and get p = 0. The
 *    corrections e^((m_old - m_new) * scale) of a tile's pairs are one exp,
 *    one pair per lane.
 *  - P.V: acc = acc * corr, then acc = fma(p[t], v[t], acc) for t in order,
 *    a pair's accumulator in PV_SLICES registers at a time; TILE_PAIRS pairs
 *    share each v[t] load.
 *
 * Batch invariance (DESIGN.md section 3): every (row, head) value is one
 * fixed sequence of lane operations that depends on that row's query, its
 * own count of valid keys per step, the cache and block_size only. Tiles
 * of pairs only share loads, and a lane's exp never sees another lane, so a
 * row gets the same bits alone (a decode step: this same function) or with
 * any neighbours of a prefill chunk, whatever the chunking or thread count.
 * The bits differ from attention.c's portable reference (its scores are
 * dot_f32 sums in another order, its softmax steps are single blocks);
 * tests/kernels/test_attention.c holds the two within 2e-6 and checks the
 * invariance bit for bit. */
#include "kernels/cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define ALWAYS __attribute__((always_inline)) inline
#define LANES 16      /* floats per zmm */
#define TILE_PAIRS 4  /* (row, head) pairs per tile ... */
#define TILE_CHUNKS 4 /* ... x 16-key chunks: 16 score chains (2 FMA ports x latency 4, twice) */
#define MAX_STEP_KEYS 256 /* larger blocks run attention.c's reference */
#define PV_SLICES 4   /* 16-float slices of head_dim per P.V pass: 4 pairs x 4 = 16 zmm */

/* di_exp_nonpos on 16 lanes, the same operations in the same order (see
 * attention.c): fnmadd(a, b, c) = c - a*b rounded once = fmaf(-a, b, c). */
TGT static ALWAYS __m512 exp_nonpos16(__m512 v) {
    const __m512 shift = _mm512_set1_ps(12582912.0f);
    __m512 c = _mm512_max_ps(v, _mm512_set1_ps(-87.0f));
    __m512 t = _mm512_fmadd_ps(c, _mm512_set1_ps(1.44269504f), shift);
    __m512 nf = _mm512_sub_ps(t, shift);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693145752f), c);
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 5040.0f), _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i sc = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000 - 127)), 23);
    __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(sc));
    __mmask16 under = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(under, e, _mm512_setzero_ps());
}

/* r[0..15] (16 rows of 16 floats) -> r[d] = column d. */
TGT static ALWAYS void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int j = 0; j < 16; j += 2) {
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);     /* per 128-bit lane: a0 b0 a1 b1 */
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]); /* a2 b2 a3 b3 */
    }
    for (int j = 0; j < 16; j += 4) { /* u[j + e]: element e of each lane, rows j..j+3 */
        u[j + 0] = _mm512_shuffle_ps(t[j], t[j + 2], 0x44);
        u[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], 0xEE);
        u[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        u[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
    }
    for (int e = 0; e < 4; e++) { /* column 4L + e: lane L of u[e], u[4+e], u[8+e], u[12+e] */
        __m512 a = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), b = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
        __m512 c = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88), d = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
        r[e] = _mm512_shuffle_f32x4(a, c, 0x88);
        r[8 + e] = _mm512_shuffle_f32x4(a, c, 0xDD);
        r[4 + e] = _mm512_shuffle_f32x4(b, d, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(b, d, 0xDD);
    }
}

/* Keys 0..n_load-1 of a step (key t at row[t], f16 or f32) -> kt
 * (n_chunks, hd, 16), zeros for keys n_load .. 16*n_chunks-1. */
TGT static void widen_k_transposed(const void *const *row, int kv_f16, int32_t n_load, int32_t hd, float *kt) {
    int32_t n_chunks = (n_load + LANES - 1) / LANES;
    for (int32_t c = 0; c < n_chunks; c++)
        for (int32_t i0 = 0; i0 < hd; i0 += LANES) {
            __m512 r[16];
            for (int32_t j = 0; j < 16; j++) {
                int32_t t = c * LANES + j;
                if (t >= n_load) r[j] = _mm512_setzero_ps();
                else if (kv_f16) r[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row[t] + i0)));
                else r[j] = _mm512_loadu_ps((const float *)row[t] + i0);
            }
            transpose16(r);
            float *dst = kt + ((int64_t)c * hd + i0) * LANES;
            for (int32_t d = 0; d < 16; d++) _mm512_storeu_ps(dst + d * LANES, r[d]);
        }
}

/* Keys 0..n_load-1 -> vbuf (n_load, hd) in f32. */
TGT static void widen_v(const void *const *row, int kv_f16, int32_t n_load, int32_t hd, float *vbuf) {
    for (int32_t t = 0; t < n_load; t++)
        for (int32_t i = 0; i < hd; i += LANES) {
            __m512 v = kv_f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row[t] + i)))
                              : _mm512_loadu_ps((const float *)row[t] + i);
            _mm512_storeu_ps(vbuf + (int64_t)t * hd + i, v);
        }
}

/* Raw scores of NP pairs against NC key chunks kc (NC, hd, 16): s[u] + 16c
 * = chain over i of fma(q[u][i], kc[c][i], .) from 0. Every chain is
 * independent: the tile only shares loads. */
TGT static ALWAYS void score_tile(const float *const *q, const float *kc, int32_t hd, float *const *s, int np,
                                  int nc) {
    __m512 acc[TILE_PAIRS][TILE_CHUNKS];
    for (int u = 0; u < np; u++)
        for (int c = 0; c < nc; c++) acc[u][c] = _mm512_setzero_ps();
    const int64_t cstride = (int64_t)hd * LANES;
    for (int32_t i = 0; i < hd; i++) {
        __m512 k[TILE_CHUNKS];
        for (int c = 0; c < nc; c++) k[c] = _mm512_loadu_ps(kc + c * cstride + (int64_t)i * LANES);
        for (int u = 0; u < np; u++) {
            __m512 qi = _mm512_set1_ps(q[u][i]);
            for (int c = 0; c < nc; c++) acc[u][c] = _mm512_fmadd_ps(qi, k[c], acc[u][c]);
        }
    }
    for (int u = 0; u < np; u++)
        for (int c = 0; c < nc; c++) _mm512_storeu_ps(s[u] + c * LANES, acc[u][c]);
}

#define SCORE_NC(NP)                                                                                   \
    switch (nc) {                                                                                      \
    case 4: score_tile(q, kc, hd, s, NP, 4); break;                                                   \
    case 3: score_tile(q, kc, hd, s, NP, 3); break;                                                   \
    case 2: score_tile(q, kc, hd, s, NP, 2); break;                                                   \
    default: score_tile(q, kc, hd, s, NP, 1); break;                                                  \
    }

/* np <= TILE_PAIRS pairs x nc <= TILE_CHUNKS chunks, register tiles
 * instantiated for each constant shape. */
TGT static void score_tiles(const float *const *q, const float *kc, int32_t hd, float *const *s, int np, int nc) {
    switch (np) {
    case 4: SCORE_NC(4) break;
    case 3: SCORE_NC(3) break;
    case 2: SCORE_NC(2) break;
    default: SCORE_NC(1) break;
    }
}

/* NP pairs x NS slices: acc (slices at acc[u] + 16 s) = acc * corr[u],
 * then fma(p[u][t], v[t], .) for t < nv[u] in order. */
TGT static ALWAYS void pv_tile(float *const *acc, const float *corr, const float *const *p, const int32_t *nv,
                               const float *vb, int32_t ld, int np, int ns) {
    __m512 r[TILE_PAIRS][PV_SLICES];
    int32_t t_common = nv[0];
    for (int u = 0; u < np; u++) {
        t_common = nv[u] < t_common ? nv[u] : t_common;
        __m512 cu = _mm512_set1_ps(corr[u]);
        for (int s = 0; s < ns; s++) r[u][s] = _mm512_mul_ps(_mm512_loadu_ps(acc[u] + s * LANES), cu);
    }
    for (int32_t t = 0; t < t_common; t++) {
        const float *v = vb + (int64_t)t * ld;
        __m512 vs[PV_SLICES];
        for (int s = 0; s < ns; s++) vs[s] = _mm512_loadu_ps(v + s * LANES);
        for (int u = 0; u < np; u++) {
            __m512 pu = _mm512_set1_ps(p[u][t]);
            for (int s = 0; s < ns; s++) r[u][s] = _mm512_fmadd_ps(pu, vs[s], r[u][s]);
        }
    }
    for (int u = 0; u < np; u++) { /* the longer rows' last keys continue in order */
        for (int32_t t = t_common; t < nv[u]; t++) {
            __m512 pu = _mm512_set1_ps(p[u][t]);
            for (int s = 0; s < ns; s++)
                r[u][s] = _mm512_fmadd_ps(pu, _mm512_loadu_ps(vb + (int64_t)t * ld + s * LANES), r[u][s]);
        }
        for (int s = 0; s < ns; s++) _mm512_storeu_ps(acc[u] + s * LANES, r[u][s]);
    }
}

#define PV_NP(NS)                                                                                      \
    switch (np) {                                                                                      \
    case 4: pv_tile(a, corr, p, nv, v, hd, 4, NS); break;                                             \
    case 3: pv_tile(a, corr, p, nv, v, hd, 3, NS); break;                                             \
    case 2: pv_tile(a, corr, p, nv, v, hd, 2, NS); break;                                             \
    default: pv_tile(a, corr, p, nv, v, hd, 1, NS); break;                                            \
    }

/* All of head_dim for np <= TILE_PAIRS pairs, PV_SLICES slices at a time
 * (then single slices: the per-element operations are the same). */
TGT static void pv_pairs(float *const *acc, const float *corr, const float *const *p, const int32_t *nv,
                         const float *vb, int32_t hd, int np) {
    for (int32_t s0 = 0; s0 < hd;) {
        float *a[TILE_PAIRS];
        for (int u = 0; u < np; u++) a[u] = acc[u] + s0;
        const float *v = vb + s0;
        if (hd - s0 >= PV_SLICES * LANES) {
            PV_NP(PV_SLICES)
            s0 += PV_SLICES * LANES;
        } else {
            PV_NP(1)
            s0 += LANES;
        }
    }
}

/* One tile of np pairs (q[u]; scores, then probabilities s[u] (n_chunks *
 * 16); state acc[u] (hd), *m[u], *l[u]; nv[u] valid keys) against the step
 * in kt / vbuf. */
TGT static void attend_tile(const float *const *q, float *const *s, float *const *acc, float *const *m,
                            float *const *l, const int32_t *nv, int np, const float *kt, const float *vbuf,
                            int32_t hd, float scale) {
    int32_t nv_max = 0;
    for (int u = 0; u < np; u++) nv_max = nv[u] > nv_max ? nv[u] : nv_max;
    int32_t n_chunks_max = (nv_max + LANES - 1) / LANES;
    for (int32_t c0 = 0; c0 < n_chunks_max; c0 += TILE_CHUNKS) {
        int nc = n_chunks_max - c0 < TILE_CHUNKS ? n_chunks_max - c0 : TILE_CHUNKS;
        float *sc[TILE_PAIRS];
        for (int u = 0; u < np; u++) sc[u] = s[u] + c0 * LANES;
        score_tiles(q, kt + (int64_t)c0 * hd * LANES, hd, sc, np, nc);
    }
    /* m is kept in raw score units: scale > 0 commutes with the max, and
     * the probabilities are e^(s * scale - m * scale), one fma per 16 keys
     * before the exp. Lanes past a row's valid keys (only in its last
     * chunk) are left out of the max and get probability 0. */
    float arg[LANES] = {0}, corr[LANES], nms[TILE_PAIRS];
    __mmask16 last[TILE_PAIRS];
    for (int u = 0; u < np; u++) {
        int32_t n_chunks = (nv[u] + LANES - 1) / LANES, rem = nv[u] - (n_chunks - 1) * LANES;
        last[u] = (__mmask16)(rem == LANES ? 0xFFFFu : (1u << rem) - 1u);
        __m512 vmax = _mm512_set1_ps(-INFINITY);
        for (int32_t c = 0; c + 1 < n_chunks; c++) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s[u] + c * LANES));
        vmax = _mm512_mask_max_ps(vmax, last[u], vmax, _mm512_loadu_ps(s[u] + (n_chunks - 1) * LANES));
        float smax = _mm512_reduce_max_ps(vmax);
        float m_new = smax > *m[u] ? smax : *m[u];
        arg[u] = (*m[u] - m_new) * scale; /* -inf on the first step: e^arg = 0 */
        nms[u] = -(m_new * scale);
        *m[u] = m_new;
    }
    _mm512_storeu_ps(corr, exp_nonpos16(_mm512_loadu_ps(arg))); /* lanewise: one pair per lane */
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int u = 0; u < np; u++) {
        int32_t n_chunks = (nv[u] + LANES - 1) / LANES;
        __m512 vnm = _mm512_set1_ps(nms[u]), vsum = _mm512_setzero_ps();
        for (int32_t c = 0; c < n_chunks; c++) {
            __m512 e = exp_nonpos16(_mm512_fmadd_ps(_mm512_loadu_ps(s[u] + c * LANES), vscale, vnm));
            if (c + 1 == n_chunks) e = _mm512_maskz_mov_ps(last[u], e);
            _mm512_storeu_ps(s[u] + c * LANES, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        *l[u] = *l[u] * corr[u] + _mm512_reduce_add_ps(vsum);
    }
    pv_pairs(acc, corr, (const float *const *)s, nv, vbuf, hd, np);
}

/* Key rows k0 .. k0+n-1 of KV head kvh, read through the block table. */
static void step_rows(const di_attn_args *a, const int32_t *blocks, int32_t kvh, int32_t k0, int32_t n,
                      const void **krow, const void **vrow) {
    const int32_t bs = a->block_size, hd = a->head_dim;
    const int64_t tok_stride = (int64_t)a->n_kv_heads * hd;
    const size_t elem = a->kv_f16 ? sizeof(uint16_t) : sizeof(float);
    for (int32_t t0 = 0; t0 < n;) { /* block by block */
        int32_t key = k0 + t0, slot = key % bs, nb = bs - slot < n - t0 ? bs - slot : n - t0;
        int64_t off = ((int64_t)blocks[key / bs] * bs + slot) * tok_stride + (int64_t)kvh * hd;
        for (int32_t t = 0; t < nb; t++) {
            krow[t0 + t] = (const char *)a->k_cache + (size_t)(off + t * tok_stride) * elem;
            vrow[t0 + t] = (const char *)a->v_cache + (size_t)(off + t * tok_stride) * elem;
        }
        t0 += nb;
    }
}

/* Scratch, 64-byte aligned inside the caller's region: kt (n_chunks, hd,
 * 16), vbuf (step_keys, hd), then per pair (n * group of them): scores
 * (n_chunks * 16), acc (hd), m, l. */
TGT int di_attn_run_avx512(const di_attn_args *a, int32_t r0, int32_t n, int32_t kvh, float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size;
    if (hd % LANES || bs > MAX_STEP_KEYS || !(a->scale > 0.0f)) return 0;
    const int32_t group = a->n_heads / a->n_kv_heads, n_pairs = n * group;
    const int32_t step_keys = di_attention_step_keys(bs), n_chunks = (step_keys + LANES - 1) / LANES;
    float *kt = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *vbuf = kt + (int64_t)n_chunks * hd * LANES;
    float *sbuf = vbuf + (int64_t)step_keys * hd;              /* (n_pairs, n_chunks * 16) */
    float *accbuf = sbuf + (int64_t)n_pairs * n_chunks * LANES; /* (n_pairs, hd) */
    float *mbuf = accbuf + (int64_t)n_pairs * hd, *lbuf = mbuf + n_pairs;
    int32_t max_pos = 0;
    for (int32_t j = 0; j < n; j++) max_pos = a->pos[r0 + j] > max_pos ? a->pos[r0 + j] : max_pos;
    /* a window that cuts keys off: the portable loop (attention.c) runs it */
    if (a->window > 0 && max_pos >= a->window) return 0;
    for (int32_t p = 0; p < n_pairs; p++) {
        mbuf[p] = -INFINITY;
        lbuf[p] = 0.0f;
    }
    memset(accbuf, 0, sizeof(float) * (size_t)n_pairs * (size_t)hd);

    const int32_t *blocks = a->row_blocks[r0];
    for (int32_t k0 = 0; k0 <= max_pos; k0 += step_keys) {
        int32_t n_load = max_pos + 1 - k0 < step_keys ? max_pos + 1 - k0 : step_keys;
        const void *krow[MAX_STEP_KEYS], *vrow[MAX_STEP_KEYS];
        step_rows(a, blocks, kvh, k0, n_load, krow, vrow);
        widen_k_transposed(krow, a->kv_f16, n_load, hd, kt);
        widen_v(vrow, a->kv_f16, n_load, hd, vbuf);
        /* the pairs whose row still attends in this step, TILE_PAIRS at a time */
        const float *q[TILE_PAIRS];
        float *s[TILE_PAIRS], *acc[TILE_PAIRS], *m[TILE_PAIRS], *l[TILE_PAIRS];
        int32_t nv[TILE_PAIRS];
        int np = 0;
        for (int32_t j = 0; j < n; j++) {
            int32_t pos = a->pos[r0 + j];
            if (k0 > pos) continue; /* this row's history ended earlier */
            int32_t n_valid = pos + 1 - k0 < step_keys ? pos + 1 - k0 : step_keys;
            for (int32_t g = 0; g < group; g++) {
                int32_t p = j * group + g;
                q[np] = a->q + ((int64_t)(r0 + j) * a->n_heads + kvh * group + g) * hd;
                s[np] = sbuf + (int64_t)p * n_chunks * LANES;
                acc[np] = accbuf + (int64_t)p * hd;
                m[np] = mbuf + p;
                l[np] = lbuf + p;
                nv[np] = n_valid;
                if (++np == TILE_PAIRS) {
                    attend_tile(q, s, acc, m, l, nv, np, kt, vbuf, hd, a->scale);
                    np = 0;
                }
            }
        }
        if (np) attend_tile(q, s, acc, m, l, nv, np, kt, vbuf, hd, a->scale);
    }
    for (int32_t j = 0; j < n; j++)
        for (int32_t g = 0; g < group; g++) {
            int32_t p = j * group + g;
            float *o = a->out + ((int64_t)(r0 + j) * a->n_heads + kvh * group + g) * hd;
            const float *ag = accbuf + (int64_t)p * hd;
            __m512 inv = _mm512_set1_ps(1.0f / lbuf[p]);
            for (int32_t i = 0; i < hd; i += LANES) _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_loadu_ps(ag + i), inv));
        }
    return 1;
}

#endif
