/* EPLB: expert-parallel load balancing, DeepInfer's policy
 * (model_executor/eplb/policy.py) ported to C, plus the sliding window of
 * per-expert token counts it reads and the moe_lb figure it logs.
 *
 * Terms (as policy.py): a logical expert is one of the model's n_logical
 * routed experts; a physical expert is a copy of one placed in a slot;
 * n_phys = n_logical + redundant slots, n_local = n_phys / ranks slots per
 * rank, rank r owning slots [r*n_local, (r+1)*n_local).
 *
 *   replication: one redundant slot at a time, per layer, to the logical
 *     expert that minimises the summed (over steps) maximum per-replica
 *     load if it got one more copy (ties: lowest id);
 *   placement (n_local > 1): replicas in descending mean per-replica load
 *     (stable), each put on the non-full rank minimising the summed
 *     per-step maximum rank load (ties: lowest rank).
 * Arithmetic is float32 like the torch original (eplb.c says where sums
 * differ). Checked against policy.py on the
 * committed goldens of scripts/gen_goldens_eplb.py. */
#ifndef DI_DIST_EPLB_H
#define DI_DIST_EPLB_H

#include "base/status.h"

#include <stdint.h>

/* tokens (n_steps, n_layers, n_logical) counts; outputs:
 *   p2l    (n_layers, n_phys)                              logical id per slot
 *   l2p    (n_layers, n_logical, n_phys - n_logical + 1)   slots of each logical, -1 padded
 *   lcount (n_layers, n_logical)                           replicas of each logical */
di_status di_eplb_rebalance(const int64_t *tokens, int32_t n_steps, int32_t n_layers, int32_t n_logical,
                            int32_t n_phys, int32_t n_local, int32_t *p2l, int32_t *l2p, int32_t *lcount,
                            di_error *err);

/* The initial layout DeepInfer starts from: slots [0..n_logical) hold the
 * logical experts in order, redundant slot i holds logical i mod n_logical. */
void di_eplb_initial(int32_t n_layers, int32_t n_logical, int32_t n_phys, int32_t *p2l, int32_t *l2p,
                     int32_t *lcount);

/* moe_lb = sum over (step, layer) of the max rank load / sum of the mean
 * rank load, rank loads from tokens under placement p2l / lcount (each
 * logical's count split evenly over its replicas). 1.0 is perfect. */
double di_eplb_moe_lb(const int64_t *tokens, int32_t n_steps, int32_t n_layers, int32_t n_logical,
                      int32_t n_phys, int32_t n_local, const int32_t *p2l, const int32_t *lcount);

/* Per-expert token counts of the last n_cap steps (a ring). */
typedef struct di_eplb_window {
    int32_t n_cap, n_layers, n_logical;
    int32_t next, n_filled;
    int64_t *counts;   /* (n_cap, n_layers, n_logical) */
    int64_t *current;  /* (n_layers, n_logical) the step being counted */
} di_eplb_window;

di_status di_eplb_window_init(di_eplb_window *w, int32_t n_cap, int32_t n_layers, int32_t n_logical,
                              di_error *err);
void di_eplb_window_free(di_eplb_window *w);
/* Moves the current step's counts into the ring and zeroes them. */
void di_eplb_window_push(di_eplb_window *w);
/* Copies the filled steps, oldest first, into out (n_filled, layers, logical). */
int32_t di_eplb_window_copy(const di_eplb_window *w, int64_t *out);

#endif
