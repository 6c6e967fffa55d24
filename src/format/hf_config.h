/* HF config.json reader: validated getters over a JSON object.
 *
 * Every getter checks type and range and, on failure, names the file and
 * the full key path, e.g.
 *   "config.json: text_config.num_hidden_layers: expected integer in
 *    [1, 1024], got -3".
 * Keys may be dotted paths into nested objects ("rope_scaling.factor",
 * "compress_rates.compressed_sparse_attention"); a key that itself contains
 * a '.' cannot be addressed, which no HF config field does.
 *
 * A section is a view of a nested object with its own handle, so a model
 * loader can read the text model of a V4.1 config (under "text_config") with
 * the same code as a V4 config (at the top level):
 *   di_hf_config *text;
 *   di_hf_config_text_section(cfg, &text, &err);   // text_config or root
 *   di_hf_config_get_int(text, "hidden_size", 1, 65536, &hidden, &err);
 *
 * Required getters: DI_ERR_NOT_FOUND when the key is absent, DI_ERR_FORMAT
 * when it is null or of the wrong type, DI_ERR_RANGE when out of range.
 * The _or variants return the default when the key is absent or null (HF
 * writes "pad_token_id": null for "unset") and fail like the required ones
 * otherwise. Integers are JSON integers only (4.0 is not an integer);
 * floats accept JSON integers and reals and must be finite.
 * Strings returned point into the handle and live until it is closed. */
#ifndef DI_FORMAT_HF_CONFIG_H
#define DI_FORMAT_HF_CONFIG_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Real configs are a few KB; anything past this is hostile. */
#define DI_HF_CONFIG_MAX_BYTES (16u * 1024u * 1024u)

typedef struct di_hf_config di_hf_config;

/* Reads and parses path (a JSON object, duplicate keys rejected). On success
 * the caller owns *out (di_hf_config_close). */
di_status di_hf_config_open(const char *path, di_hf_config **out, di_error *err);
/* Same from memory (copied while parsing; data need not outlive the call).
 * name is used in messages. */
di_status di_hf_config_open_memory(const void *data, uint64_t size, const char *name,
                                   di_hf_config **out, di_error *err);
/* A view of the object at key (e.g. "text_config", "rope_scaling"). The
 * section is independent: close it with di_hf_config_close, before or after
 * its parent. Errors as for a required getter. */
di_status di_hf_config_section(const di_hf_config *cfg, const char *key, di_hf_config **out,
                               di_error *err);
/* "text_config" when present and not null, else a view of cfg itself. */
di_status di_hf_config_text_section(const di_hf_config *cfg, di_hf_config **out, di_error *err);
void di_hf_config_close(di_hf_config *cfg);

const char *di_hf_config_name(const di_hf_config *cfg); /* file name for messages */
const char *di_hf_config_path(const di_hf_config *cfg); /* "" for the root, else "text_config" */

/* true when key is present and not null. */
bool di_hf_config_has(const di_hf_config *cfg, const char *key);

di_status di_hf_config_get_int(const di_hf_config *cfg, const char *key, int64_t lo, int64_t hi,
                               int64_t *out, di_error *err);
di_status di_hf_config_get_int_or(const di_hf_config *cfg, const char *key, int64_t lo,
                                  int64_t hi, int64_t def, int64_t *out, di_error *err);
di_status di_hf_config_get_float(const di_hf_config *cfg, const char *key, double lo, double hi,
                                 double *out, di_error *err);
di_status di_hf_config_get_float_or(const di_hf_config *cfg, const char *key, double lo,
                                    double hi, double def, double *out, di_error *err);
di_status di_hf_config_get_bool(const di_hf_config *cfg, const char *key, bool *out,
                                di_error *err);
di_status di_hf_config_get_bool_or(const di_hf_config *cfg, const char *key, bool def, bool *out,
                                   di_error *err);
di_status di_hf_config_get_string(const di_hf_config *cfg, const char *key, const char **out,
                                  di_error *err);
di_status di_hf_config_get_string_or(const di_hf_config *cfg, const char *key, const char *def,
                                     const char **out, di_error *err);
/* A string that must be one of names[0..n_names); *out is its index. */
di_status di_hf_config_get_enum(const di_hf_config *cfg, const char *key,
                                const char *const *names, int n_names, int *out, di_error *err);
di_status di_hf_config_get_enum_or(const di_hf_config *cfg, const char *key,
                                   const char *const *names, int n_names, int def, int *out,
                                   di_error *err);

/* Arrays: out has room for cap elements; *n is set to the length, which must
 * be <= cap (DI_ERR_RANGE otherwise). Each element is checked like the
 * scalar getter. Use di_hf_config_array_len to size out first. */
di_status di_hf_config_array_len(const di_hf_config *cfg, const char *key, size_t *n,
                                 di_error *err);
di_status di_hf_config_get_int_array(const di_hf_config *cfg, const char *key, int64_t lo,
                                     int64_t hi, int64_t *out, size_t cap, size_t *n,
                                     di_error *err);
di_status di_hf_config_get_float_array(const di_hf_config *cfg, const char *key, double lo,
                                       double hi, double *out, size_t cap, size_t *n,
                                       di_error *err);
di_status di_hf_config_get_string_array(const di_hf_config *cfg, const char *key,
                                        const char **out, size_t cap, size_t *n, di_error *err);
/* Token ids as HF writes them (eos_token_id): one integer or an array of
 * integers; a single integer gives *n == 1. */
di_status di_hf_config_get_token_ids(const di_hf_config *cfg, const char *key, int64_t lo,
                                     int64_t hi, int64_t *out, size_t cap, size_t *n,
                                     di_error *err);

#endif
