/* libFuzzer target: di_image_decode (PNG / JPEG / WebP through libpng,
 * libjpeg-turbo, libwebp) and, on success, the preprocessing a request runs
 * next (layout, resize, patches) with the tiny_vl geometry. Seeds:
 * tests/data/{seeds,malformed}/image. Limits are small so that each input
 * stays fast; only crashes, leaks and sanitizer reports matter. */
#include "vision/image.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    di_image_limits lim = {.max_bytes = 1 << 20, .max_pixels = 1 << 20, .max_side = 4096};
    di_image img;
    di_error err;
    if (di_image_decode(data, size, &lim, &img, &err)) return 0;
    const di_image_cfg cfg = {.patch_size = 14, .downsample_ratio = 2, .max_tokens = 50, .min_pixels = 3136,
                              .max_wh_ratio = 4, .mean = 0.5f, .std = 0.5f};
    di_image_layout lay;
    di_image rz = {0};
    if (!di_image_layout_of(img.width, img.height, &cfg, &lay, &err) && !di_image_prepare(&img, &cfg, &lay, &rz, &err)) {
        float *p = malloc((size_t)lay.n_vit_w * lay.n_vit_h * 3 * 14 * 14 * sizeof(float));
        if (p) (void)di_image_patches(&rz, &cfg, &lay, p, &err);
        free(p);
    }
    di_image_free(&rz);
    di_image_free(&img);
    return 0;
}
