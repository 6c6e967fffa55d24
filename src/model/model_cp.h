/* Context parallelism behind di_model_forward (model.c): every rank of the
 * group holds the same batch (the engine runs the same requests on every
 * rank); a batch large enough is split with DeepInfer's zigzag (dist/cp.h),
 * per sequence over that sequence's rows in the batch, each rank runs its
 * share through the architecture's CP forward (which gathers the per-layer
 * state, so every rank ends with the whole cache), and the rows' logits are
 * gathered so every rank sees all of them, in the batch's row order. */
#ifndef DI_MODEL_MODEL_CP_H
#define DI_MODEL_MODEL_CP_H

#include "base/status.h"
#include "dist/dist.h"
#include "model/batch.h"

/* The architecture's forward of this rank's share (collective: it is called
 * on every rank, with zero rows on a rank that has none). */
typedef di_status (*di_cp_share_fn)(void *user, const di_batch *share, float *logits, di_error *err);

/* Collective: DI_OK when every rank of d holds this same batch, else an
 * error on every rank (call it before deciding anything from b). */
di_status di_cp_agree(di_dist *d, const di_batch *b, di_error *err);

/* Collective over d; b the same on every rank (di_cp_agree). */
di_status di_cp_forward(di_dist *d, int32_t n_vocab, const di_batch *b, float *logits_out, di_cp_share_fn fwd,
                        void *user, di_error *err);

#endif
