/* Image input for DeepSeek-V4.1: decode, DeepSeek's resize geometry, and
 * the patches the vision tower reads.
 *
 *   di_image_decode(bytes, n, limits, &img)   PNG / JPEG / WebP -> RGB8 (libpng,
 *                                             libjpeg-turbo, libwebp), the pixel
 *                                             modes converted as PIL's
 *                                             convert("RGB") does (DeepInfer's
 *                                             ve/processor/image_processor.py
 *                                             decode_image)
 *   di_image_layout(w, h, cfg, &lay)          compute_image_layout: patch grid,
 *                                             LLM grid and token count
 *   di_image_prepare(img, cfg, &resized)      ImageProcessorAnyRes._prepare_image:
 *                                             PIL-exact bicubic resize (contain
 *                                             or stretch)
 *   di_image_patches(resized, lay, out)       rgb_pad_to_patches: centre pad,
 *                                             (x/255 - mean)/std rounded to bf16,
 *                                             patches (n_vit_h*n_vit_w, 3, p, p)
 *   di_image_token_types(lay, out)            the placeholder layout
 *                                             START (IMAGE*w NEW_LINE)*h END
 *
 * Every input is hostile: sizes are checked against the limits before any
 * pixel buffer is allocated; decoders' errors come back as di_status (no
 * longjmp escapes, no abort). Ownership: di_image_free frees what decode /
 * prepare allocated. */
#ifndef DI_VISION_IMAGE_H
#define DI_VISION_IMAGE_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

/* Request limits (defaults: DI_IMAGE_DEFAULT_*). */
#define DI_IMAGE_DEFAULT_MAX_BYTES (20u << 20)        /* encoded bytes per image */
#define DI_IMAGE_DEFAULT_MAX_PIXELS (40u * 1000 * 1000) /* width * height per image */
#define DI_IMAGE_DEFAULT_MAX_SIDE 20000               /* either side, pixels */
#define DI_IMAGE_DEFAULT_MAX_IMAGES 16                /* per request */

typedef struct di_image_limits {
    uint64_t max_bytes;   /* encoded size */
    uint64_t max_pixels;  /* decoded width * height */
    int32_t max_side;     /* decoded width and height */
} di_image_limits;

void di_image_limits_default(di_image_limits *l);

typedef enum di_image_format {
    DI_IMAGE_UNKNOWN = 0,
    DI_IMAGE_PNG,
    DI_IMAGE_JPEG,
    DI_IMAGE_WEBP,
} di_image_format;

/* The format from the first bytes (magic), DI_IMAGE_UNKNOWN when none. */
di_image_format di_image_sniff(const uint8_t *data, size_t n);
const char *di_image_format_name(di_image_format f);

typedef struct di_image {
    int32_t width, height;
    uint8_t *rgb; /* (height, width, 3), owned */
} di_image;

void di_image_free(di_image *img);

/* Decodes PNG (any bit depth / colour type / interlace; palette -> its RGB,
 * alpha dropped, 16-bit colour -> high byte, 16-bit grey clamped to 255 as
 * PIL's I;16 -> RGB does), JPEG (grey or YCbCr; CMYK/YCCK refused) and WebP
 * (alpha dropped; animations refused). */
di_status di_image_decode(const uint8_t *data, size_t n, const di_image_limits *lim, di_image *out, di_error *err);

/* The geometry knobs of DeepInfer's ImageProcessorAnyRes (HF vision_config). */
typedef struct di_image_cfg {
    int32_t patch_size;       /* 14 */
    int32_t downsample_ratio; /* 3 (V4.1-Flash) */
    int32_t max_tokens;       /* max_image_tokens */
    int64_t min_pixels;
    double max_wh_ratio;      /* 0 = none */
    float mean, std;          /* 0.5, 0.5 for every channel */
} di_image_cfg;

typedef struct di_image_layout {
    int32_t n_llm_h, n_llm_w;
    int32_t best_width, best_height;
    int32_t n_vit_w, n_vit_h;
    int32_t num_tokens;       /* n_llm_h * (n_llm_w + 1) + 2 */
} di_image_layout;

/* compute_image_layout for an image of width x height. Fails on sizes the
 * reference cannot place (a zero side, or one that leaves no patch). */
di_status di_image_layout_of(int64_t width, int64_t height, const di_image_cfg *cfg, di_image_layout *out,
                             di_error *err);

/* The resize DeepInfer runs before the tower: PIL ImageOps.contain into
 * (best_width, best_height), or a plain resize to it when the image is at
 * least max_wh_ratio wide. out is newly allocated (may be 0 x best_width when
 * contain rounds a side to 0, as Pillow does). */
di_status di_image_prepare(const di_image *img, const di_image_cfg *cfg, const di_image_layout *lay, di_image *out,
                           di_error *err);

/* PIL's Image.resize(size, BICUBIC) on RGB8 (Resample.c: separable, 22-bit
 * fixed-point coefficients, horizontal pass first). */
di_status di_image_resize_bicubic(const di_image *in, int32_t width, int32_t height, di_image *out, di_error *err);

/* Patches (n_vit_h * n_vit_w, 3, p, p) in scanline order, the resized image
 * centred on a canvas of pad colour int(mean*255), each value
 * bf16((x/255 - mean)/std) as a float. out holds n_vit_h*n_vit_w*3*p*p. */
di_status di_image_patches(const di_image *resized, const di_image_cfg *cfg, const di_image_layout *lay, float *out,
                           di_error *err);

/* mm token types (DeepInfer multimodal_tokens.py TokenType). */
enum {
    DI_MM_TEXT = 1,
    DI_MM_IMAGE = 2,
    DI_MM_IMAGE_START = 3,
    DI_MM_IMAGE_END = 4,
    DI_MM_IMAGE_NEW_LINE = 5,
};
/* Image special ids are vocab + offset (ImageTokenOffset). */
enum {
    DI_IMAGE_TOKEN_START = 0,
    DI_IMAGE_TOKEN_PAD = 1,
    DI_IMAGE_TOKEN_IMAGE = 2,
    DI_IMAGE_TOKEN_NEW_LINE = 3,
    DI_IMAGE_TOKEN_END = 4,
    DI_IMAGE_TOKEN_NUM_SPECIAL = 5,
};
/* out (lay->num_tokens): START, (IMAGE x n_llm_w, NEW_LINE) x n_llm_h, END. */
void di_image_token_types(const di_image_layout *lay, uint8_t *out);

#endif
