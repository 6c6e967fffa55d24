/* DeepSeek-V4.1's vision tower on the CPU kernels: the rows that replace an
 * image's placeholder tokens.
 *
 *   image bytes -> di_image_decode -> layout / resize / patches (vision/image.h)
 *     -> patch embed (linear 3*p*p -> E, bias)
 *     -> depth x block: x += attn(norm1(x)); x += mlp(norm2(x))
 *          attn: qkv (bias), 2D rotary (row | column halves, NeoX pairing),
 *                full attention inside the image, out proj (bias)
 *          mlp:  w1 -> silu(left) * right -> w2 (no bias)
 *     -> norm (fc_norm)                                  (n_vit_h*n_vit_w, E)
 *     -> r x r downsample: channel-major concat of each block (zero padded)
 *     -> projector: linear, GELU (erf), linear            (n_llm_h*n_llm_w, D)
 *     -> rows in placeholder order: image_start, (image rows, image_newline)
 *        per LLM row, image_end                            (num_tokens, D)
 * as DeepInfer 0.1.0 model_executor/models/vision_encoder/{vit.py,
 * mlp_projector.py, vl_aligner.py} and tilelang_ops/image_embed_ops.py
 * (batch_downsample, replace_input_embeds) define it; RMSNorm eps 1e-6. The
 * tower runs in f32 on the checkpoint's bf16 weights (the "ideal" numerics;
 * DeepInfer runs it in bf16 on the GPU).
 *
 * Config: vision_config (patch_size, downsample_ratio, max_image_tokens,
 * min_pixels, max_wh_ratio, hidden_size; depth / num_heads / mlp_ratio /
 * multiple_of default to vit.py's constants 32 / 16 / 2.7 / 128) and the
 * root image_token_id. A checkpoint without them is text-only. */
#ifndef DI_MODEL_DEEPSEEK_V41_VISION_H
#define DI_MODEL_DEEPSEEK_V41_VISION_H

#include "model/deepseek_v41.h"
#include "vision/image.h"

/* 1 when the model loaded a vision tower. */
int di_dsv41_has_vision(const di_dsv41_model *m);
/* The image geometry (valid only with a tower). */
const di_image_cfg *di_dsv41_image_cfg(const di_dsv41_model *m);
/* The prompt's image placeholder token id, -1 without a tower. */
int32_t di_dsv41_image_token_id(const di_dsv41_model *m);

/* One encoded image: the rows of its expanded placeholder. */
typedef struct di_dsv41_image_rows {
    di_image_layout layout;
    int32_t n_tokens;   /* layout.num_tokens */
    int32_t *token;     /* (n_tokens): vocab + IMAGE, then vocab + IMAGE_PAD (DeepInfer's ids) */
    float *rows;        /* (n_tokens, n_embd) the input embeddings of those positions */
} di_dsv41_image_rows;

void di_dsv41_image_rows_free(di_dsv41_image_rows *r);

/* Image bytes -> rows (decode, preprocess, tower, projector, merge). lim
 * NULL = the defaults. Fails cleanly on any bad image. */
di_status di_dsv41_encode_image(const di_dsv41_model *m, const uint8_t *bytes, size_t n, const di_image_limits *lim,
                                di_dsv41_image_rows *out, di_threadpool *pool, di_error *err);

/* The number of positions those bytes expand to (decode + layout, no
 * tower): what di_dsv41_encode_image's out->n_tokens will be. */
di_status di_dsv41_image_n_tokens(const di_dsv41_model *m, const uint8_t *bytes, size_t n, const di_image_limits *lim,
                                  int32_t *n_tokens, di_error *err);

/* The tower alone, for tests: patches (n_vit_h*n_vit_w, 3, p, p) ->
 * vit_out (n_patches, E) after the final norm (may be NULL) and
 * rows (num_tokens, n_embd) as above. */
di_status di_dsv41_vision_forward(const di_dsv41_model *m, const di_image_layout *lay, const float *patches,
                                  float *vit_out, float *rows, di_threadpool *pool, di_error *err);

/* Loader hook (deepseek_v41.c): binds the tower when the config has one. */
di_status dsv41_vision_load(di_dsv41_model *m, const char *dir, di_error *err);

#endif
