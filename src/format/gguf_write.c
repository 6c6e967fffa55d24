/* GGUF v3 serialization (little-endian, as the reader expects):
 *   "GGUF" u32 version u64 n_tensors u64 n_kv
 *   n_kv x (string key, u32 type, value)
 *   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset)
 *   padding to alignment, then tensor data, each padded to alignment.
 * A string is u64 length + bytes; an array is u32 element type + u64 count
 * + elements. This file assumes a little-endian host, as the reader does. */
#include "format/gguf_write.h"

#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_VERSION 3

typedef struct wr {
    FILE *f;
    int failed;
} wr;

static void put(wr *w, const void *p, size_t n) {
    if (!w->failed && n && fwrite(p, 1, n, w->f) != n) w->failed = 1;
}
static void put_u32(wr *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wr *w, uint64_t v) { put(w, &v, 8); }
static void put_str(wr *w, const char *p, uint64_t n) {
    put_u64(w, n);
    put(w, p, (size_t)n);
}
static void put_zeros(wr *w, uint64_t n) {
    static const uint8_t z[64];
    while (n > 0) {
        size_t k = n > sizeof z ? sizeof z : (size_t)n;
        put(w, z, k);
        n -= k;
    }
}

/* Size in bytes of a scalar GGUF type (0 for STRING/ARRAY). */
static size_t scalar_size(di_gguf_type t) {
    switch (t) {
    case DI_GGUF_UINT8: case DI_GGUF_INT8: case DI_GGUF_BOOL: return 1;
    case DI_GGUF_UINT16: case DI_GGUF_INT16: return 2;
    case DI_GGUF_UINT32: case DI_GGUF_INT32: case DI_GGUF_FLOAT32: return 4;
    case DI_GGUF_UINT64: case DI_GGUF_INT64: case DI_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* A scalar kv value back in its file width (the reader widened it). */
static void put_scalar(wr *w, const di_gguf_kv *kv) {
    switch (kv->type) {
    case DI_GGUF_UINT8: case DI_GGUF_INT8: { uint8_t v = (uint8_t)kv->val.u64; put(w, &v, 1); break; }
    case DI_GGUF_BOOL: { uint8_t v = kv->val.b ? 1 : 0; put(w, &v, 1); break; }
    case DI_GGUF_UINT16: case DI_GGUF_INT16: { uint16_t v = (uint16_t)kv->val.u64; put(w, &v, 2); break; }
    case DI_GGUF_UINT32: case DI_GGUF_INT32: put_u32(w, (uint32_t)kv->val.u64); break;
    case DI_GGUF_FLOAT32: { float v = (float)kv->val.f64; put(w, &v, 4); break; }
    case DI_GGUF_FLOAT64: put(w, &kv->val.f64, 8); break;
    default: put_u64(w, kv->val.u64); break; /* UINT64, INT64 */
    }
}

static void put_kv(wr *w, const di_gguf_kv *kv) {
    put_str(w, kv->key, strlen(kv->key));
    put_u32(w, (uint32_t)kv->type);
    if (kv->type == DI_GGUF_STRING) {
        put_str(w, kv->str.ptr, kv->str.len);
    } else if (kv->type == DI_GGUF_ARRAY) {
        put_u32(w, (uint32_t)kv->arr_type);
        put_u64(w, kv->arr_len);
        if (kv->arr_type == DI_GGUF_STRING) {
            for (uint64_t i = 0; i < kv->arr_len; i++) put_str(w, kv->arr_str[i].ptr, kv->arr_str[i].len);
        } else {
            put(w, kv->arr_data, (size_t)(kv->arr_len * scalar_size(kv->arr_type)));
        }
    } else {
        put_scalar(w, kv);
    }
}

static uint64_t pad_to(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

di_status di_gguf_write_file(const char *path, const di_gguf *src, const char *u32_key, uint32_t u32_val,
                             const di_gguf_wtensor *t, uint64_t n, di_error *err) {
    uint64_t align = di_gguf_alignment(src);
    if (align == 0 || align > (1u << 20))
        return di_error_set(err, DI_ERR_INVALID_ARG, "gguf write: alignment %llu", (unsigned long long)align);
    for (uint64_t i = 0; i < n; i++) {
        di_dtype dt;
        uint64_t rb, total = 0;
        if (t[i].n_dims < 1 || t[i].n_dims > DI_GGUF_MAX_DIMS || di_dtype_from_ggml(t[i].ggml_type, &dt) != DI_OK ||
            di_dtype_row_bytes(dt, t[i].ne[0], &rb) != DI_OK)
            return di_error_set(err, DI_ERR_INVALID_ARG, "gguf write: tensor '%s': bad type or shape", t[i].name);
        total = rb;
        for (uint32_t d = 1; d < t[i].n_dims; d++) {
            if (t[i].ne[d] < 1 || di_mul_overflow_u64(total, (uint64_t)t[i].ne[d], &total))
                return di_error_set(err, DI_ERR_INVALID_ARG, "gguf write: tensor '%s': bad shape", t[i].name);
        }
        if (total != t[i].n_bytes)
            return di_error_set(err, DI_ERR_INVALID_ARG, "gguf write: tensor '%s': %llu bytes, shape needs %llu",
                                t[i].name, (unsigned long long)t[i].n_bytes, (unsigned long long)total);
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return di_error_set(err, DI_ERR_NOMEM, "gguf write: out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    wr w = {fopen(tmp, "wb"), 0};
    if (!w.f) {
        di_status s = di_error_set(err, DI_ERR_IO, "%s: cannot create", tmp);
        free(tmp);
        return s;
    }
    uint64_t n_kv = di_gguf_kv_count(src);
    int replaced = 0;
    for (uint64_t i = 0; u32_key && i < n_kv; i++) replaced |= !strcmp(di_gguf_kv_at(src, i)->key, u32_key);
    put(&w, "GGUF", 4);
    put_u32(&w, GGUF_VERSION);
    put_u64(&w, n);
    put_u64(&w, n_kv + (u32_key && !replaced ? 1 : 0));
    for (uint64_t i = 0; i < n_kv; i++) {
        const di_gguf_kv *kv = di_gguf_kv_at(src, i);
        if (u32_key && !strcmp(kv->key, u32_key)) {
            put_str(&w, u32_key, strlen(u32_key));
            put_u32(&w, DI_GGUF_UINT32);
            put_u32(&w, u32_val);
        } else {
            put_kv(&w, kv);
        }
    }
    if (u32_key && !replaced) {
        put_str(&w, u32_key, strlen(u32_key));
        put_u32(&w, DI_GGUF_UINT32);
        put_u32(&w, u32_val);
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        put_str(&w, t[i].name, strlen(t[i].name));
        put_u32(&w, t[i].n_dims);
        for (uint32_t d = 0; d < t[i].n_dims; d++) put_u64(&w, (uint64_t)t[i].ne[d]);
        put_u32(&w, t[i].ggml_type);
        put_u64(&w, off);
        off = pad_to(off + t[i].n_bytes, align);
    }
    long pos = ftell(w.f);
    if (pos < 0) w.failed = 1;
    else put_zeros(&w, pad_to((uint64_t)pos, align) - (uint64_t)pos);
    for (uint64_t i = 0; i < n; i++) {
        put(&w, t[i].data, (size_t)t[i].n_bytes);
        put_zeros(&w, pad_to(t[i].n_bytes, align) - t[i].n_bytes);
    }
    if (fclose(w.f) != 0) w.failed = 1;
    di_status s = DI_OK;
    if (w.failed) s = di_error_set(err, DI_ERR_IO, "%s: write failed", tmp);
    else if (rename(tmp, path) != 0) s = di_error_set(err, DI_ERR_IO, "%s: cannot rename to %s", tmp, path);
    if (s != DI_OK) remove(tmp);
    free(tmp);
    return s;
}
