/* libFuzzer target: config.json parsing and the getters a DeepSeek-V4/V4.1
 * loader calls (seeds: tests/data/{seeds,malformed}/config). Results are
 * ignored; only crashes, leaks and sanitizer reports matter. */
#include "format/hf_config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { CAP = 64 };

static void read_fields(const di_hf_config *c) {
    static const char *const INTS[] = {
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
        "q_lora_rank", "o_groups", "o_lora_rank", "n_routed_experts", "num_experts_per_tok",
        "sliding_window", "index_topk", "hc_mult", "rope_scaling.original_max_position_embeddings",
        "compress_rates.compressed_sparse_attention", "a.b.c.d", "", ".", "..x"};
    static const char *const SCORING[] = {"sqrtsoftplus", "softmax", "sigmoid"};
    di_error err;
    int64_t i64, arr[CAP];
    double d, darr[CAP];
    bool b;
    const char *s, *sarr[CAP];
    size_t n;
    int e;
    for (size_t k = 0; k < sizeof INTS / sizeof INTS[0]; k++) {
        (void)di_hf_config_get_int(c, INTS[k], 1, 1 << 20, &i64, &err);
        (void)di_hf_config_get_int_or(c, INTS[k], INT64_MIN, INT64_MAX, 0, &i64, &err);
    }
    (void)di_hf_config_get_float(c, "rms_norm_eps", 0, 1, &d, &err);
    (void)di_hf_config_get_float_or(c, "rope_scaling.factor", -1e300, 1e300, 1, &d, &err);
    (void)di_hf_config_get_bool(c, "norm_topk_prob", &b, &err);
    (void)di_hf_config_get_bool_or(c, "tie_word_embeddings", false, &b, &err);
    (void)di_hf_config_get_string(c, "model_type", &s, &err);
    (void)di_hf_config_get_string_or(c, "hidden_act", "silu", &s, &err);
    (void)di_hf_config_get_enum(c, "scoring_func", SCORING, 3, &e, &err);
    (void)di_hf_config_get_enum_or(c, "scoring_func", SCORING, 3, 0, &e, &err);
    (void)di_hf_config_array_len(c, "compress_ratios", &n, &err);
    (void)di_hf_config_get_int_array(c, "compress_ratios", 0, 1024, arr, CAP, &n, &err);
    (void)di_hf_config_get_float_array(c, "compress_ratios", 0, 1024, darr, CAP, &n, &err);
    (void)di_hf_config_get_string_array(c, "layer_types", sarr, CAP, &n, &err);
    (void)di_hf_config_get_token_ids(c, "eos_token_id", 0, 1 << 20, arr, CAP, &n, &err);
    (void)di_hf_config_has(c, "quantization_config.weight_block_size");
    di_hf_config *sec = NULL;
    if (di_hf_config_section(c, "rope_scaling", &sec, &err) == DI_OK) {
        (void)di_hf_config_get_float(sec, "factor", 1, 1e6, &d, &err);
        di_hf_config_close(sec);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    di_hf_config *c = NULL;
    di_error err;
    if (di_hf_config_open_memory(data, size, "config.json", &c, &err) != DI_OK) return 0;
    read_fields(c);
    di_hf_config *text = NULL;
    if (di_hf_config_text_section(c, &text, &err) == DI_OK) {
        di_hf_config_close(c); /* the section must stand on its own */
        c = NULL;
        read_fields(text);
        di_hf_config_close(text);
    }
    di_hf_config_close(c);
    return 0;
}
