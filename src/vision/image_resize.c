/* PIL's bicubic Image.resize on RGB8, to the bit (Pillow src/libImaging/
 * Resample.c, read for its arithmetic): a separable filter, a = -0.5,
 * support 2 scaled by the reduction factor (antialiasing), coefficients per
 * output pixel normalized to sum 1 and then to 22-bit fixed point
 * (PRECISION_BITS = 32 - 8 - 2), accumulation in int32 from a half-unit bias,
 * clipped to 8 bits after each pass; the horizontal pass runs first, over
 * only the source rows the vertical pass reads. A pass whose size does not
 * change is skipped, and a same-size resize is a copy, as in Pillow. */
#include "vision/image.h"

#include "base/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)
#define BICUBIC_A (-0.5)
#define BICUBIC_SUPPORT 2.0

void di_image_free(di_image *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL;
    img->width = img->height = 0;
}

static double bicubic(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((BICUBIC_A + 2.0) * x - (BICUBIC_A + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * BICUBIC_A;
    return 0.0;
}

/* Coefficients of each output pixel over in_size inputs: bounds (out, 2) =
 * (first input, count), kk (out, ksize) fixed point. Returns ksize or -1. */
static int32_t coeffs(int32_t in_size, int32_t out_size, int32_t **bounds_out, int32_t **kk_out) {
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = BICUBIC_SUPPORT * filterscale;
    const int32_t ksize = (int32_t)ceil(support) * 2 + 1;
    double *k = di_malloc_array((size_t)ksize, sizeof(double));
    int32_t *kk = di_malloc_array((size_t)out_size * (size_t)ksize, sizeof(int32_t));
    int32_t *bounds = di_malloc_array((size_t)out_size * 2, sizeof(int32_t));
    if (!k || !kk || !bounds) {
        free(k);
        free(kk);
        free(bounds);
        return -1;
    }
    for (int32_t xx = 0; xx < out_size; xx++) {
        const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
        int32_t xmin = (int32_t)(center - support + 0.5), xmax = (int32_t)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int32_t x = 0; x < xmax; x++) {
            k[x] = bicubic((x + xmin - center + 0.5) * ss);
            ww += k[x];
        }
        for (int32_t x = 0; x < ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? k[x] / ww : k[x]) : 0.0;
            kk[(int64_t)xx * ksize + x] =
                v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS)) : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        bounds[xx * 2] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
    free(k);
    *bounds_out = bounds;
    *kk_out = kk;
    return ksize;
}

static uint8_t clip8(int32_t in) {
    if (in >= (1 << PRECISION_BITS << 8)) return 255;
    if (in <= 0) return 0;
    return (uint8_t)(in >> PRECISION_BITS);
}

di_status di_image_resize_bicubic(const di_image *in, int32_t width, int32_t height, di_image *out, di_error *err) {
    if (!in || !in->rgb || in->width < 1 || in->height < 1 || width < 1 || height < 1 || width > (1 << 16) ||
        height > (1 << 16))
        return di_error_set(err, DI_ERR_INVALID_ARG, "resize: bad size %dx%d -> %dx%d", in ? in->width : 0,
                            in ? in->height : 0, width, height);
    const size_t out_bytes = (size_t)width * (size_t)height * 3;
    if (width == in->width && height == in->height) {
        out->rgb = di_malloc_array(out_bytes, 1);
        if (!out->rgb) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
        memcpy(out->rgb, in->rgb, out_bytes);
        out->width = width;
        out->height = height;
        return DI_OK;
    }
    int32_t *bh = NULL, *kh = NULL, *bv = NULL, *kv = NULL;
    const int32_t ksh = coeffs(in->width, width, &bh, &kh);
    const int32_t ksv = ksh < 0 ? -1 : coeffs(in->height, height, &bv, &kv);
    uint8_t *tmp = NULL, *dst = NULL;
    di_status s = DI_OK;
    if (ksh < 0 || ksv < 0) {
        s = di_error_set(err, DI_ERR_NOMEM, "out of memory");
        goto done;
    }
    const uint8_t *src = in->rgb;
    int32_t sw = in->width, sh = in->height;
    if (width != in->width) {
        /* horizontal pass over rows [first, last) that the vertical pass reads */
        const int32_t first = bv[0], last = bv[height * 2 - 2] + bv[height * 2 - 1];
        for (int32_t i = 0; i < height; i++) bv[i * 2] -= first;
        const int32_t rows = last - first;
        tmp = di_malloc_array((size_t)width * (size_t)rows * 3, 1);
        if (!tmp) {
            s = di_error_set(err, DI_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int32_t yy = 0; yy < rows; yy++) {
            const uint8_t *row = src + (int64_t)(yy + first) * sw * 3;
            for (int32_t xx = 0; xx < width; xx++) {
                const int32_t xmin = bh[xx * 2], xmax = bh[xx * 2 + 1];
                const int32_t *k = kh + (int64_t)xx * ksh;
                int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
                for (int32_t x = 0; x < xmax; x++) {
                    const uint8_t *px = row + (int64_t)(x + xmin) * 3;
                    s0 += px[0] * k[x];
                    s1 += px[1] * k[x];
                    s2 += px[2] * k[x];
                }
                uint8_t *o = tmp + ((int64_t)yy * width + xx) * 3;
                o[0] = clip8(s0);
                o[1] = clip8(s1);
                o[2] = clip8(s2);
            }
        }
        src = tmp;
        sw = width;
        sh = rows;
    }
    if (height != in->height) {
        dst = di_malloc_array(out_bytes, 1);
        if (!dst) {
            s = di_error_set(err, DI_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int32_t yy = 0; yy < height; yy++) {
            const int32_t ymin = bv[yy * 2], ymax = bv[yy * 2 + 1];
            const int32_t *k = kv + (int64_t)yy * ksv;
            for (int32_t xx = 0; xx < width; xx++) {
                int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
                for (int32_t y = 0; y < ymax; y++) {
                    const uint8_t *px = src + ((int64_t)(y + ymin) * sw + xx) * 3;
                    s0 += px[0] * k[y];
                    s1 += px[1] * k[y];
                    s2 += px[2] * k[y];
                }
                uint8_t *o = dst + ((int64_t)yy * width + xx) * 3;
                o[0] = clip8(s0);
                o[1] = clip8(s1);
                o[2] = clip8(s2);
            }
        }
    } else {
        (void)sh;
        dst = tmp; /* only the horizontal pass ran (it covered every row) */
        tmp = NULL;
    }
    out->rgb = dst;
    out->width = width;
    out->height = height;
    dst = NULL;
done:
    free(tmp);
    free(dst);
    free(bh);
    free(kh);
    free(bv);
    free(kv);
    return s;
}
