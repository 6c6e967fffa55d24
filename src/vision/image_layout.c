/* DeepSeek's image geometry (DeepInfer 0.1.0 ve/processor/image_processor.py:
 * compute_image_layout, safe_resize, solve_resize_ratio, ImageOps.contain via
 * _prepare_image) and the patch tensor of tilelang_ops/image_embed_ops.py
 * rgb_pad_to_patches. Every rounding below carries weight: it decides the
 * token count and the pixel grid, so each follows the Python expression it
 * mirrors (float division in double, int() = truncation, round() = half to
 * even, // = floor). Goldens: scripts/gen_goldens_vision.py. */
#include "vision/image.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIDE_PX (1 << 30) /* keeps every pixel count in int32 / int64 arithmetic */

static int32_t llm_tokens(int64_t n_llm_h, int64_t n_llm_w) { return (int32_t)(n_llm_h * (n_llm_w + 1) + 2); }

/* _layout_from_pixels */
static di_status from_pixels(int64_t bw, int64_t bh, const di_image_cfg *c, di_image_layout *o, di_error *err) {
    const int64_t p = c->patch_size, d = c->downsample_ratio;
    const int64_t nvh = bh / p, nvw = bw / p;
    if (nvh < 1 || nvw < 1 || bw > MAX_SIDE_PX || bh > MAX_SIDE_PX)
        return di_error_set(err, DI_ERR_RANGE, "image: %lldx%lld pixels give a %lldx%lld patch grid",
                            (long long)bw, (long long)bh, (long long)nvw, (long long)nvh);
    const int64_t nlh = (nvh + d - 1) / d, nlw = (nvw + d - 1) / d;
    *o = (di_image_layout){.n_llm_h = (int32_t)nlh, .n_llm_w = (int32_t)nlw, .best_width = (int32_t)bw,
                           .best_height = (int32_t)bh, .n_vit_w = (int32_t)nvw, .n_vit_h = (int32_t)nvh,
                           .num_tokens = llm_tokens(nlh, nlw)};
    return DI_OK;
}

/* solve_resize_ratio: the largest grid with h * (w + 1) <= max_tokens - 2 at
 * the image's aspect. width / height are doubles because max_wh_ratio may be
 * a float in the config, which makes them floats in the reference. */
static di_status solve_ratio(double height, double width, const di_image_cfg *c, di_image_layout *o, di_error *err) {
    const double p = c->patch_size, d = c->downsample_ratio, m = c->max_tokens;
    const double r = height / width;
    const double max_w_float = sqrt((m - 2) / r + 0.25) - 0.5;
    const double max_h_float = max_w_float * r;
    double bw, bh;
    if (max_w_float < 1.0) {
        const double max_w = 1, max_h = floor((m - 2) / (max_w + 1));
        bw = max_w * p * d;
        bh = max_h * p * d;
    } else if (max_h_float < 1.0) {
        const double max_h = 1, max_w = floor((m - 2) / max_h) - 1;
        bw = max_w * p * d;
        bh = max_h * p * d;
    } else {
        const double max_w = floor(max_w_float), max_h = floor(max_h_float);
        const double bx = max_w * p * d / width, by = max_h * p * d / height;
        const double beta = bx < by ? bx : by;
        bw = floor(width * beta / p) * p;
        bh = floor(height * beta / p) * p;
    }
    if (!(bw >= 0 && bw < 1e9 && bh >= 0 && bh < 1e9))
        return di_error_set(err, DI_ERR_RANGE, "image: no patch grid fits %.0fx%.0f", width, height);
    return from_pixels((int64_t)bw, (int64_t)bh, c, o, err);
}

static di_status check_cfg(const di_image_cfg *c, di_error *err) {
    if (c->patch_size < 1 || c->patch_size > 64 || c->downsample_ratio < 1 || c->downsample_ratio > 8 ||
        c->max_tokens < 5 || c->max_tokens > (1 << 24) || c->min_pixels < 0 || c->min_pixels > ((int64_t)1 << 40) ||
        (c->max_wh_ratio != 0 && !(c->max_wh_ratio >= 1 && c->max_wh_ratio < 1e6)) || !(c->std != 0))
        return di_error_set(err, DI_ERR_INVALID_ARG, "image: invalid vision geometry config");
    return DI_OK;
}

di_status di_image_layout_of(int64_t width, int64_t height, const di_image_cfg *c, di_image_layout *out,
                             di_error *err) {
    di_status s = check_cfg(c, err);
    if (s) return s;
    if (width < 1 || height < 1 || width > (1 << 24) || height > (1 << 24))
        return di_error_set(err, DI_ERR_RANGE, "image: size %lldx%lld out of range", (long long)width,
                            (long long)height);
    double w = (double)width, h = (double)height;
    /* very wide images are first clamped to max_wh_ratio (they are stretched back on resize) */
    if (c->max_wh_ratio != 0 && w > h * c->max_wh_ratio) w = h * c->max_wh_ratio;
    const double px = w * h;
    if (px < (double)c->min_pixels && px > 0) {
        const double ratio = pow((double)c->min_pixels / px, 0.5); /* Python ** 0.5 is C pow */
        w = trunc(w * ratio);
        h = trunc(h * ratio);
    }
    const double p = c->patch_size;
    const double bw = ceil(w / p) * p, bh = ceil(h / p) * p;
    di_image_layout lay;
    s = bw >= p && bh >= p ? from_pixels((int64_t)bw, (int64_t)bh, c, &lay, err) : DI_ERR_RANGE;
    /* safe_resize: over the token limit (or an unusable grid) -> solve for the ratio */
    if (s || lay.num_tokens > c->max_tokens) {
        di_error_clear(err);
        if ((s = solve_ratio(h, w, c, &lay, err))) return s;
    }
    if (lay.num_tokens > c->max_tokens)
        return di_error_set(err, DI_ERR_RANGE, "image: %d tokens over the limit %d", lay.num_tokens, c->max_tokens);
    *out = lay;
    return DI_OK;
}

void di_image_token_types(const di_image_layout *lay, uint8_t *out) {
    int64_t k = 0;
    out[k++] = DI_MM_IMAGE_START;
    for (int32_t y = 0; y < lay->n_llm_h; y++) {
        for (int32_t x = 0; x < lay->n_llm_w; x++) out[k++] = DI_MM_IMAGE;
        out[k++] = DI_MM_IMAGE_NEW_LINE;
    }
    out[k++] = DI_MM_IMAGE_END;
}

/* ImageProcessorAnyRes._is_stretched (note >=, where the layout clamps on >) */
static int stretched(const di_image_cfg *c, int32_t w, int32_t h) {
    return c->max_wh_ratio != 0 && (double)w >= c->max_wh_ratio * (double)h;
}

di_status di_image_prepare(const di_image *img, const di_image_cfg *c, const di_image_layout *lay, di_image *out,
                           di_error *err) {
    int32_t tw = lay->best_width, th = lay->best_height;
    if (!img || !img->rgb || img->width < 1 || img->height < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "image: empty image");
    if (!stretched(c, img->width, img->height)) {
        /* PIL ImageOps.contain: keep the aspect, round() the other side */
        const double im_ratio = (double)img->width / img->height, dest_ratio = (double)tw / th;
        if (im_ratio != dest_ratio) {
            if (im_ratio > dest_ratio) {
                const int32_t nh = (int32_t)nearbyint((double)img->height / img->width * tw);
                if (nh != th) th = nh;
            } else {
                const int32_t nw = (int32_t)nearbyint((double)img->width / img->height * th);
                if (nw != tw) tw = nw;
            }
        }
        if (tw == 0 || th == 0) { /* Pillow returns an empty image of that size */
            *out = (di_image){.width = tw, .height = th, .rgb = di_malloc_array(1, 1)};
            return out->rgb ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "out of memory");
        }
    }
    return di_image_resize_bicubic(img, tw, th, out, err);
}

/* bf16 round to nearest even, as torch's .to(torch.bfloat16) */
static float round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

di_status di_image_patches(const di_image *rz, const di_image_cfg *c, const di_image_layout *lay, float *out,
                           di_error *err) {
    const int32_t p = c->patch_size, gw = lay->n_vit_w * p, gh = lay->n_vit_h * p;
    if (rz->width > gw || rz->height > gh || rz->width < 0 || rz->height < 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "image: %dx%d does not fit its %dx%d grid", rz->width,
                            rz->height, gw, gh);
    float table[256];
    for (int i = 0; i < 256; i++) table[i] = round_bf16(((float)i / 255.0f - c->mean) / c->std);
    int pad = (int)(c->mean * 255.0f); /* int() truncates; clamp to [0, 255] */
    pad = pad < 0 ? 0 : pad > 255 ? 255 : pad;
    const int32_t left = (int32_t)nearbyint((gw - rz->width) * 0.5), top = (int32_t)nearbyint((gh - rz->height) * 0.5);
    const int64_t per = (int64_t)3 * p * p;
    for (int32_t py = 0; py < lay->n_vit_h; py++)
        for (int32_t px = 0; px < lay->n_vit_w; px++) {
            float *o = out + ((int64_t)py * lay->n_vit_w + px) * per;
            for (int32_t ch = 0; ch < 3; ch++)
                for (int32_t y = 0; y < p; y++)
                    for (int32_t x = 0; x < p; x++) {
                        const int32_t gy = py * p + y - top, gx = px * p + x - left;
                        int v = pad;
                        if (gy >= 0 && gy < rz->height && gx >= 0 && gx < rz->width)
                            v = rz->rgb[((int64_t)gy * rz->width + gx) * 3 + ch];
                        o[((int64_t)ch * p + y) * p + x] = table[v];
                    }
        }
    return DI_OK;
}
