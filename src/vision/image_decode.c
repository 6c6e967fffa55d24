/* Image decoding with Debian's libraries: libpng, libjpeg-turbo, libwebp.
 *
 * Output is what DeepInfer's decode_image gives (PIL Image.open + load +
 * convert("RGB")), so the same bytes reach the same pixels:
 *   PNG   palette -> its RGB entries (tRNS ignored), grey 1/2/4 bit scaled to
 *         8, alpha dropped (no compositing), 16-bit colour / grey+alpha ->
 *         high byte (PIL's ;16B raw modes), 16-bit grey -> min(v, 255) (PIL
 *         opens it as I;16 and I -> RGB clips), interlaced passes combined
 *   JPEG  grey replicated, YCbCr with libjpeg's defaults (islow DCT, fancy
 *         upsampling: PIL's), CMYK / YCCK refused
 *   WebP  still images, alpha dropped; animations refused
 * Limits are applied to the header's size before any pixel buffer exists;
 * the libraries' longjmp error paths never leave this file. */
#include "vision/image.h"

#include "base/alloc.h"

#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>

#define MAX_JPEG_SCANS 256      /* progressive JPEGs: a scan-count bomb is refused */
#define PNG_MAX_CHUNK_BYTES (8u << 20) /* ancillary chunk memory */

void di_image_limits_default(di_image_limits *l) {
    l->max_bytes = DI_IMAGE_DEFAULT_MAX_BYTES;
    l->max_pixels = DI_IMAGE_DEFAULT_MAX_PIXELS;
    l->max_side = DI_IMAGE_DEFAULT_MAX_SIDE;
}

di_image_format di_image_sniff(const uint8_t *d, size_t n) {
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 8 && !memcmp(d, png_magic, 8)) return DI_IMAGE_PNG;
    if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return DI_IMAGE_JPEG;
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) return DI_IMAGE_WEBP;
    return DI_IMAGE_UNKNOWN;
}

const char *di_image_format_name(di_image_format f) {
    switch (f) {
    case DI_IMAGE_PNG: return "png";
    case DI_IMAGE_JPEG: return "jpeg";
    case DI_IMAGE_WEBP: return "webp";
    default: return "unknown";
    }
}

static di_status check_size(uint64_t w, uint64_t h, const di_image_limits *lim, di_error *err) {
    if (w < 1 || h < 1) return di_error_set(err, DI_ERR_FORMAT, "image: zero size %llux%llu", (unsigned long long)w,
                                            (unsigned long long)h);
    if (w > (uint64_t)lim->max_side || h > (uint64_t)lim->max_side || w * h > lim->max_pixels)
        return di_error_set(err, DI_ERR_RANGE, "image: %llux%llu pixels over the limit (%d a side, %llu in all)",
                            (unsigned long long)w, (unsigned long long)h, (int)lim->max_side,
                            (unsigned long long)lim->max_pixels);
    return DI_OK;
}

/* ---- PNG ------------------------------------------------------------------------ */

typedef struct png_src {
    const uint8_t *data;
    size_t n, off;
    char msg[160];
} png_src;

static void png_read_fn(png_structp p, png_bytep out, png_size_t len) {
    png_src *s = png_get_io_ptr(p);
    if (len > s->n - s->off) png_error(p, "truncated PNG");
    memcpy(out, s->data + s->off, len);
    s->off += len;
}

static void png_err_fn(png_structp p, png_const_charp msg) {
    png_src *s = png_get_error_ptr(p);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(p, 1);
}

static void png_warn_fn(png_structp p, png_const_charp msg) {
    (void)p;
    (void)msg;
}

static di_status decode_png(const uint8_t *data, size_t n, const di_image_limits *lim, di_image *out, di_error *err) {
    png_src src = {.data = data, .n = n};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_err_fn, png_warn_fn);
    if (!p) return di_error_set(err, DI_ERR_NOMEM, "png: out of memory");
    png_infop info = png_create_info_struct(p);
    /* volatile: live across the longjmp back into this frame */
    uint8_t *volatile rgb = NULL;
    uint8_t *volatile raw = NULL;
    png_bytep *volatile rows = NULL;
    di_status s = DI_OK;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return di_error_set(err, DI_ERR_NOMEM, "png: out of memory");
    }
    if (setjmp(png_jmpbuf(p))) {
        s = di_error_set(err, DI_ERR_FORMAT, "png: %s", src.msg[0] ? src.msg : "decode error");
        goto done;
    }
    png_set_read_fn(p, &src, png_read_fn);
    png_set_user_limits(p, (png_uint_32)lim->max_side, (png_uint_32)lim->max_side);
    png_set_chunk_malloc_max(p, PNG_MAX_CHUNK_BYTES);
    png_set_crc_action(p, PNG_CRC_DEFAULT, PNG_CRC_DEFAULT);
    png_read_info(p, info);
    png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    if ((s = check_size(w, h, lim, err))) goto done;
    int depth = png_get_bit_depth(p, info), ctype = png_get_color_type(p, info);
    const int grey16 = depth == 16 && ctype == PNG_COLOR_TYPE_GRAY;
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(p);
    if (depth == 16 && !grey16) png_set_strip_16(p); /* keeps the high byte */
    if (depth == 16 && grey16) png_set_swap(p);       /* host-order 16-bit samples */
    if (!grey16) png_set_strip_alpha(p); /* palette tRNS too (palette_to_rgb expands it) */
    if (!grey16 && !(ctype & PNG_COLOR_MASK_COLOR) && ctype != PNG_COLOR_TYPE_PALETTE) png_set_gray_to_rgb(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    const size_t rowbytes = png_get_rowbytes(p, info);
    const int channels = png_get_channels(p, info);
    if ((grey16 && (channels != 1 || rowbytes != (size_t)w * 2)) || (!grey16 && (channels != 3 || rowbytes != (size_t)w * 3))) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "png: unexpected pixel layout after conversion");
        goto done;
    }
    raw = di_malloc_array((size_t)h, rowbytes);
    rows = di_malloc_array((size_t)h, sizeof(png_bytep));
    if (!raw || !rows) {
        s = di_error_set(err, DI_ERR_NOMEM, "png: out of memory for %ux%u", (unsigned)w, (unsigned)h);
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = raw + (size_t)y * rowbytes;
    png_read_image(p, rows);
    if (grey16) {
        rgb = di_malloc_array((size_t)w * h, 3);
        if (!rgb) {
            s = di_error_set(err, DI_ERR_NOMEM, "png: out of memory");
            goto done;
        }
        const uint16_t *g = (const uint16_t *)raw;
        for (size_t i = 0; i < (size_t)w * h; i++) {
            const uint8_t v = g[i] > 255 ? 255 : (uint8_t)g[i];
            rgb[i * 3] = rgb[i * 3 + 1] = rgb[i * 3 + 2] = v;
        }
    } else {
        rgb = raw;
        raw = NULL;
    }
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = rgb;
    rgb = NULL;
done:
    png_destroy_read_struct(&p, &info, NULL);
    free(rows);
    free(raw);
    free(rgb);
    return s;
}

/* ---- JPEG ----------------------------------------------------------------------- */

typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_error_exit_fn(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_emit_fn(j_common_ptr cinfo, int level) {
    (void)cinfo;
    (void)level; /* warnings (e.g. premature end: libjpeg pads) are not printed */
}

static void jpeg_progress_fn(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->is_decompressor && d->input_scan_number > MAX_JPEG_SCANS) {
        jpeg_err *e = (jpeg_err *)cinfo->err;
        snprintf(e->msg, sizeof e->msg, "more than %d progressive scans", MAX_JPEG_SCANS);
        longjmp(e->jb, 1);
    }
}

static di_status decode_jpeg(const uint8_t *data, size_t n, const di_image_limits *lim, di_image *out,
                             di_error *err) {
    struct jpeg_decompress_struct cinfo;
    jpeg_err jerr;
    struct jpeg_progress_mgr prog = {.progress_monitor = jpeg_progress_fn};
    uint8_t *volatile rgb = NULL;
    volatile di_status s = DI_OK;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = jpeg_error_exit_fn;
    jerr.pub.emit_message = jpeg_emit_fn;
    jerr.msg[0] = 0;
    if (setjmp(jerr.jb)) {
        if (!s) s = di_error_set(err, DI_ERR_FORMAT, "jpeg: %s", jerr.msg);
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    cinfo.progress = &prog;
    jpeg_mem_src(&cinfo, data, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    if ((s = check_size(cinfo.image_width, cinfo.image_height, lim, err))) goto done;
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "jpeg: CMYK images are not supported (convert to RGB)");
        goto done;
    }
    cinfo.out_color_space = JCS_RGB; /* grey -> replicated, as PIL L -> RGB */
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3 || cinfo.output_width != cinfo.image_width ||
        cinfo.output_height != cinfo.image_height) {
        s = di_error_set(err, DI_ERR_UNSUPPORTED, "jpeg: unexpected output layout");
        goto done;
    }
    const size_t w = cinfo.output_width, h = cinfo.output_height;
    rgb = di_malloc_array(w * h, 3);
    if (!rgb) {
        s = di_error_set(err, DI_ERR_NOMEM, "jpeg: out of memory");
        goto done;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = rgb + (size_t)cinfo.output_scanline * w * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = rgb;
    rgb = NULL;
done:
    jpeg_destroy_decompress(&cinfo);
    free(rgb);
    return s;
}

/* ---- WebP ----------------------------------------------------------------------- */

static di_status decode_webp(const uint8_t *data, size_t n, const di_image_limits *lim, di_image *out,
                             di_error *err) {
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(data, n, &f);
    if (st != VP8_STATUS_OK) return di_error_set(err, DI_ERR_FORMAT, "webp: bad header (status %d)", (int)st);
    if (f.has_animation) return di_error_set(err, DI_ERR_UNSUPPORTED, "webp: animated images are not supported");
    di_status s = check_size((uint64_t)f.width, (uint64_t)f.height, lim, err);
    if (s) return s;
    const size_t w = (size_t)f.width, h = (size_t)f.height;
    uint8_t *rgb = di_malloc_array(w * h, 3);
    if (!rgb) return di_error_set(err, DI_ERR_NOMEM, "webp: out of memory");
    if (!WebPDecodeRGBInto(data, n, rgb, w * h * 3, (int)(w * 3))) {
        free(rgb);
        return di_error_set(err, DI_ERR_FORMAT, "webp: decode failed (truncated or corrupt)");
    }
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = rgb;
    return DI_OK;
}

di_status di_image_decode(const uint8_t *data, size_t n, const di_image_limits *lim, di_image *out, di_error *err) {
    di_image_limits def;
    if (!lim) {
        di_image_limits_default(&def);
        lim = &def;
    }
    if (!out) return di_error_set(err, DI_ERR_INVALID_ARG, "image: NULL output");
    *out = (di_image){0};
    if (!data || n == 0) return di_error_set(err, DI_ERR_FORMAT, "image: empty");
    if (n > lim->max_bytes)
        return di_error_set(err, DI_ERR_RANGE, "image: %zu bytes over the limit %llu", n,
                            (unsigned long long)lim->max_bytes);
    switch (di_image_sniff(data, n)) {
    case DI_IMAGE_PNG: return decode_png(data, n, lim, out, err);
    case DI_IMAGE_JPEG: return decode_jpeg(data, n, lim, out, err);
    case DI_IMAGE_WEBP: return decode_webp(data, n, lim, out, err);
    default:
        return di_error_set(err, DI_ERR_UNSUPPORTED, "image: not a PNG, JPEG or WebP file (unknown magic bytes)");
    }
}
