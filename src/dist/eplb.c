/* DeepInfer's EPLB policy in C (see eplb.h). Each piece names the function
 * of policy.py it mirrors. float32 where torch computes in float32. The
 * replication's per-candidate sums over steps are float32 in step order,
 * as torch's sum over the outer dimension: its scores differ by the 1e-4
 * tie-breakers only, a few float32 ulps, so a double sum chose other
 * experts on the 256-expert goldens. The placement's scores are sums of
 * float32 loads accumulated in double (their ties are exact or far apart).
 * The goldens check both against torch. */
#include "dist/eplb.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIFF_STEP 1e-4f /* policy.py: tokens + arange * 1e-4 makes every score distinct */

void di_eplb_initial(int32_t n_layers, int32_t n_logical, int32_t n_phys, int32_t *p2l, int32_t *l2p,
                     int32_t *lcount) {
    const int32_t R1 = n_phys - n_logical + 1;
    for (int32_t l = 0; l < n_layers; l++) {
        for (int32_t e = 0; e < n_logical; e++) {
            lcount[l * n_logical + e] = 0;
            for (int32_t c = 0; c < R1; c++) l2p[((int64_t)l * n_logical + e) * R1 + c] = -1;
        }
        for (int32_t p = 0; p < n_phys; p++) {
            int32_t e = p % n_logical;
            p2l[(int64_t)l * n_phys + p] = e;
            l2p[((int64_t)l * n_logical + e) * R1 + lcount[l * n_logical + e]++] = p;
        }
    }
}

/* policy.py _batch_greedy_indices for one layer: idx (n_phys) is a
 * permutation of the slots, each run of n_local one rank's slots. */
static void greedy_layer(const int64_t *tokens, int32_t S, int32_t L, int32_t E, int32_t l, int32_t P,
                         int32_t cap, const int32_t *p2l, const int32_t *lcount, float *wphys, int32_t *order,
                         float *vec, double *loads, double *peaks, int32_t *occ, int32_t *idx) {
    const int32_t ranks = P / cap;
    /* weights = tokens.sum(0, float32) / logical_count, gathered per slot */
    for (int32_t p = 0; p < P; p++) {
        int32_t e = p2l[p];
        double sum = 0.0;
        for (int32_t s = 0; s < S; s++) sum += (double)tokens[((int64_t)s * L + l) * E + e];
        wphys[p] = (float)sum / (float)lcount[e];
        order[p] = p;
    }
    /* argsort(descending, stable): insertion sort keeps equal weights in slot order */
    for (int32_t i = 1; i < P; i++)
        for (int32_t j = i; j > 0 && wphys[order[j - 1]] < wphys[order[j]]; j--) {
            int32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* vectors[e][s] = tokens / logical_count */
    for (int32_t e = 0; e < E; e++)
        for (int32_t s = 0; s < S; s++)
            vec[(int64_t)e * S + s] = (float)tokens[((int64_t)s * L + l) * E + e] / (float)lcount[e];
    for (int64_t i = 0; i < (int64_t)ranks * S; i++) loads[i] = 0.0;
    for (int32_t s = 0; s < S; s++) peaks[s] = 0.0;
    for (int32_t r = 0; r < ranks; r++) occ[r] = 0;
    for (int32_t job = 0; job < P; job++) {
        const float *v = vec + (int64_t)p2l[order[job]] * S;
        int32_t best = -1;
        double best_score = INFINITY;
        for (int32_t r = 0; r < ranks; r++) {
            if (occ[r] == cap) continue;
            double sc = 0.0;
            for (int32_t s = 0; s < S; s++) {
                float cand = (float)loads[(int64_t)r * S + s] + v[s];
                sc += cand > (float)peaks[s] ? cand : (float)peaks[s];
            }
            if (best < 0 || sc < best_score) { /* argmin: first of equals */
                best = r;
                best_score = sc;
            }
        }
        idx[best * cap + occ[best]++] = order[job];
        for (int32_t s = 0; s < S; s++) {
            float u = (float)loads[(int64_t)best * S + s] + v[s];
            loads[(int64_t)best * S + s] = u;
            if (u > (float)peaks[s]) peaks[s] = u;
        }
    }
}

di_status di_eplb_rebalance(const int64_t *tokens, int32_t S, int32_t L, int32_t E, int32_t P, int32_t cap,
                            int32_t *p2l, int32_t *l2p, int32_t *lcount, di_error *err) {
    if (S < 1 || L < 1 || E < 1 || P < E || cap < 1 || P % cap)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "eplb: %d steps, %d layers, %d logical, %d physical, %d per rank", (int)S, (int)L,
                            (int)E, (int)P, (int)cap);
    const int32_t R = P - E, R1 = R + 1, ranks = P / cap;
    float *score = di_malloc_array((size_t)S * E, sizeof(float));
    float *colsum = di_malloc_array((size_t)E, sizeof(float));
    float *wphys = di_malloc_array((size_t)P, sizeof(float));
    int32_t *order = di_malloc_array((size_t)P * 3 + ranks, sizeof(int32_t));
    float *vec = di_malloc_array((size_t)E * S, sizeof(float));
    double *loads = di_malloc_array((size_t)ranks * S + S, sizeof(double));
    int32_t *p2l_old = di_malloc_array((size_t)P, sizeof(int32_t));
    di_status st = DI_OK;
    if (!score || !colsum || !wphys || !order || !vec || !loads || !p2l_old) {
        st = di_error_set(err, DI_ERR_NOMEM, "eplb: out of memory");
        goto done;
    }
    int32_t *idx = order + P, *inv = order + 2 * P, *occ = order + 3 * P;
    double *peaks = loads + (int64_t)ranks * S;
    for (int32_t l = 0; l < L; l++) {
        int32_t *pl = p2l + (int64_t)l * P, *cl = lcount + (int64_t)l * E, *ll = l2p + (int64_t)l * E * R1;
        for (int32_t e = 0; e < E; e++) {
            cl[e] = 1;
            pl[e] = e;
            ll[(int64_t)e * R1] = e;
            for (int32_t c = 1; c < R1; c++) ll[(int64_t)e * R1 + c] = -1;
        }
        /* replication: rebalance_experts_global's loop */
        for (int32_t i = 0; i < R; i++) {
            for (int32_t e = 0; e < E; e++) colsum[e] = 0.0f;
            for (int32_t s = 0; s < S; s++) {
                const int64_t *t = tokens + ((int64_t)s * L + l) * E;
                float *sc = score + (int64_t)s * E;
                int32_t am = 0;
                for (int32_t e = 0; e < E; e++) {
                    sc[e] = ((float)t[e] + (float)e * DIFF_STEP) / (float)cl[e];
                    if (sc[e] > sc[am]) am = e;
                }
                float vmax = sc[am];
                sc[am] = (float)t[am] / (float)(cl[am] + 1);
                float vnew = sc[0];
                for (int32_t e = 1; e < E; e++) vnew = sc[e] > vnew ? sc[e] : vnew;
                /* values[j] = vmax for j != argmax, the new max for j = argmax */
                for (int32_t e = 0; e < E; e++) colsum[e] += e == am ? vnew : vmax;
            }
            int32_t red = 0;
            for (int32_t e = 1; e < E; e++)
                if (colsum[e] < colsum[red]) red = e;
            pl[E + i] = red;
            ll[(int64_t)red * R1 + cl[red]] = E + i;
            cl[red]++;
        }
        if (cap > 1) {
            greedy_layer(tokens, S, L, E, l, P, cap, pl, cl, wphys, order, vec, loads, peaks, occ, idx);
            memcpy(p2l_old, pl, (size_t)P * sizeof *pl);
            for (int32_t p = 0; p < P; p++) {
                pl[p] = p2l_old[idx[p]];
                inv[idx[p]] = p;
            }
            for (int64_t c = 0; c < (int64_t)E * R1; c++)
                if (ll[c] >= 0) ll[c] = inv[ll[c]];
        }
    }
done:
    free(score);
    free(colsum);
    free(wphys);
    free(order);
    free(vec);
    free(loads);
    free(p2l_old);
    return st;
}

double di_eplb_moe_lb(const int64_t *tokens, int32_t S, int32_t L, int32_t E, int32_t P, int32_t cap,
                      const int32_t *p2l, const int32_t *lcount) {
    const int32_t ranks = P / cap;
    double sum_max = 0.0, sum_mean = 0.0;
    for (int32_t s = 0; s < S; s++)
        for (int32_t l = 0; l < L; l++) {
            double mx = 0.0, tot = 0.0;
            for (int32_t r = 0; r < ranks; r++) {
                double load = 0.0;
                for (int32_t j = 0; j < cap; j++) {
                    int32_t e = p2l[(int64_t)l * P + r * cap + j];
                    load += (double)tokens[((int64_t)s * L + l) * E + e] / (double)lcount[(int64_t)l * E + e];
                }
                mx = load > mx ? load : mx;
                tot += load;
            }
            sum_max += mx;
            sum_mean += tot / ranks;
        }
    return sum_mean > 0.0 ? sum_max / sum_mean : 1.0;
}

di_status di_eplb_window_init(di_eplb_window *w, int32_t n_cap, int32_t n_layers, int32_t n_logical,
                              di_error *err) {
    memset(w, 0, sizeof *w);
    if (n_cap < 1) return di_error_set(err, DI_ERR_INVALID_ARG, "eplb: window of %d steps", (int)n_cap);
    w->n_cap = n_cap;
    w->n_layers = n_layers;
    w->n_logical = n_logical;
    w->counts = di_calloc((size_t)(n_cap + 1) * n_layers * n_logical, sizeof(int64_t));
    if (!w->counts) return di_error_set(err, DI_ERR_NOMEM, "eplb: out of memory");
    w->current = w->counts + (int64_t)n_cap * n_layers * n_logical;
    return DI_OK;
}

void di_eplb_window_free(di_eplb_window *w) {
    free(w->counts);
    memset(w, 0, sizeof *w);
}

void di_eplb_window_push(di_eplb_window *w) {
    const int64_t n = (int64_t)w->n_layers * w->n_logical;
    memcpy(w->counts + (int64_t)w->next * n, w->current, (size_t)n * sizeof(int64_t));
    memset(w->current, 0, (size_t)n * sizeof(int64_t));
    w->next = (w->next + 1) % w->n_cap;
    if (w->n_filled < w->n_cap) w->n_filled++;
}

int32_t di_eplb_window_copy(const di_eplb_window *w, int64_t *out) {
    const int64_t n = (int64_t)w->n_layers * w->n_logical;
    int32_t first = w->n_filled < w->n_cap ? 0 : w->next;
    for (int32_t i = 0; i < w->n_filled; i++)
        memcpy(out + i * n, w->counts + ((first + i) % w->n_cap) * n, (size_t)n * sizeof(int64_t));
    return w->n_filled;
}
