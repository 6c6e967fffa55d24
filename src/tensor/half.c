/* Row converters for the plain element types: floats of every width and the
 * integer / bool types safetensors checkpoints carry (converted as numbers).
 * Elements are loaded with memcpy so a row may start at any address. */
#include "tensor/half.h"
#include "tensor/quant.h"

#include <string.h>

void di_quant_f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void di_quant_f32_from_float(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void di_quant_f16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, sizeof h);
        dst[i] = di_f16_to_f32(h);
    }
}

void di_quant_f16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = di_f32_to_f16(src[i]);
        memcpy(p + 2 * i, &h, sizeof h);
    }
}

void di_quant_bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b;
        memcpy(&b, p + 2 * i, sizeof b);
        dst[i] = di_bf16_to_f32(b);
    }
}

void di_quant_bf16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = di_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &b, sizeof b);
    }
}

/* F64 narrows with the C conversion (round to nearest in the default
 * floating-point environment; out of range gives +-inf). */
void di_quant_f64_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, p + 8 * i, sizeof v);
        dst[i] = (float)v;
    }
}

void di_quant_i8_to_float(const void *src, float *dst, int64_t n) {
    const int8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = (float)p[i];
}

void di_quant_i16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        int16_t v;
        memcpy(&v, p + 2 * i, sizeof v);
        dst[i] = (float)v;
    }
}

void di_quant_i32_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, p + 4 * i, sizeof v);
        dst[i] = (float)v;
    }
}

void di_quant_i64_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, p + 8 * i, sizeof v);
        dst[i] = (float)v;
    }
}

void di_quant_u8_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = (float)p[i];
}

/* Any non-zero byte is true: safetensors writers only emit 0/1, but a hostile
 * file must still give a defined value. */
void di_quant_bool_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = p[i] ? 1.0f : 0.0f;
}
