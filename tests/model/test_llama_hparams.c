/* model/llama_hparams: hyper-parameters read back from the tiny llama seeds,
 * defaults for optional keys, tensor pointers filled by validation, and the
 * specific status and message for representative bad files (the whole
 * llama_* corpus is swept in tests/format/test_gguf.c). */
#include "test_util.h"

#include "format/gguf.h"
#include "model/llama_hparams.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

static di_gguf *open_rel(const char *rel) {
    char path[4096];
    di_gguf *g = NULL;
    di_error err = {0};
    di_status s = di_gguf_open(di_test_path(path, sizeof path, rel), &g, &err);
    if (s) print_error("%s: %s\n", rel, err.msg);
    assert_int_equal(s, DI_OK);
    return g;
}

static void tiny_llama_hparams_read_back(void **state) {
    (void)state;
    di_gguf *g = open_rel("tests/data/seeds/gguf/tiny_llama.gguf");
    di_llama_hparams hp;
    di_error err = {0};
    assert_int_equal(di_llama_hparams_from_gguf(g, &hp, &err), DI_OK);
    assert_int_equal(hp.n_layers, 2);
    assert_int_equal(hp.n_embd, 4);
    assert_int_equal(hp.n_heads, 2);
    assert_int_equal(hp.n_heads_kv, 1);
    assert_int_equal(hp.head_dim, 2);
    assert_int_equal(hp.n_ff, 8);
    assert_int_equal(hp.n_ctx_train, 64);
    assert_int_equal(hp.n_vocab, 8);
    assert_int_equal(hp.n_tokens, 8);
    assert_int_equal(hp.n_rot, 2);
    assert_float_equal(hp.rope_freq_base, 10000.0f, 0.0f);
    assert_float_equal(hp.rms_eps, 1e-5f, 1e-12f);
    assert_int_equal(hp.rope_scaling, DI_LLAMA_ROPE_SCALING_NONE);
    assert_float_equal(hp.rope_scaling_factor, 1.0f, 0.0f);
    assert_int_equal(hp.tok.bos, 1);
    assert_int_equal(hp.tok.eos, 2);
    assert_int_equal(hp.tok.unk, 0);
    assert_int_equal(hp.tok.pad, -1);
    assert_int_equal(hp.tok.eot, -1);
    di_gguf_close(g);
}

static void validation_fills_layer_pointers(void **state) {
    (void)state;
    di_gguf *g = open_rel("tests/data/seeds/gguf/tiny_llama.gguf");
    di_llama_hparams hp;
    di_llama_tensors lt;
    di_error err = {0};
    assert_int_equal(di_llama_hparams_from_gguf(g, &hp, &err), DI_OK);
    assert_int_equal(di_llama_validate_tensors(g, &hp, &lt, &err), DI_OK);
    assert_int_equal(lt.n_layers, 2);
    assert_ptr_equal(lt.token_embd, di_gguf_find_tensor(g, "token_embd.weight"));
    assert_ptr_equal(lt.output_norm, di_gguf_find_tensor(g, "output_norm.weight"));
    assert_true(lt.tied_output);
    assert_ptr_equal(lt.output, lt.token_embd);
    assert_null(lt.rope_freqs);
    const char *parts[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                           "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
    for (uint32_t il = 0; il < 2; il++) {
        const di_llama_layer_tensors *l = &lt.layers[il];
        const di_gguf_tensor *got[] = {l->attn_norm, l->attn_q, l->attn_k, l->attn_v,
                                       l->attn_output, l->ffn_norm, l->ffn_gate, l->ffn_up,
                                       l->ffn_down};
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%u.%s.weight", il, parts[k]);
            assert_ptr_equal(got[k], di_gguf_find_tensor(g, name));
        }
    }
    /* Shapes as documented: attn_output maps heads*head_dim -> n_embd. */
    assert_int_equal(lt.layers[0].attn_k->ne[1], hp.n_heads_kv * hp.head_dim);
    assert_int_equal(lt.layers[1].ffn_down->ne[0], hp.n_ff);
    di_llama_tensors_free(&lt);
    assert_null(lt.layers);
    di_llama_tensors_free(&lt); /* idempotent */
    di_gguf_close(g);
}

static void optional_keys_default_and_untied_output(void **state) {
    (void)state;
    di_gguf *g = open_rel("tests/data/seeds/gguf/tiny_llama_untied_yarn.gguf");
    di_llama_hparams hp;
    di_llama_tensors lt;
    di_error err = {0};
    assert_int_equal(di_llama_hparams_from_gguf(g, &hp, &err), DI_OK);
    assert_int_equal(hp.n_heads_kv, hp.n_heads); /* default */
    assert_int_equal(hp.n_rot, hp.head_dim);     /* default */
    assert_float_equal(hp.rope_freq_base, 10000.0f, 0.0f);
    assert_int_equal(hp.n_vocab, 10); /* llama.vocab_size pads past the 8 tokens */
    assert_int_equal(hp.n_tokens, 8);
    assert_int_equal(hp.rope_scaling, DI_LLAMA_ROPE_SCALING_YARN);
    assert_float_equal(hp.rope_scaling_factor, 4.0f, 0.0f);
    assert_int_equal(hp.rope_scaling_orig_ctx, 16);
    assert_int_equal(hp.tok.sep, 3); /* llama.cpp's spelling "seperator" */
    assert_string_equal(di_llama_rope_scaling_name(hp.rope_scaling), "yarn");
    assert_int_equal(di_llama_validate_tensors(g, &hp, &lt, &err), DI_OK);
    assert_false(lt.tied_output);
    assert_ptr_equal(lt.output, di_gguf_find_tensor(g, "output.weight"));
    assert_ptr_not_equal(lt.output, lt.token_embd);
    assert_ptr_equal(lt.rope_freqs, di_gguf_find_tensor(g, "rope_freqs.weight"));
    di_llama_tensors_free(&lt);
    di_gguf_close(g);
}

/* Runs hparams then tensor validation on a malformed file; returns the first
 * failure and leaves its message in err. */
static di_status validate_file(const char *name, di_error *err) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/malformed/gguf/%s", name);
    di_gguf *g = open_rel(rel);
    di_llama_hparams hp;
    di_llama_tensors lt;
    di_status s = di_llama_hparams_from_gguf(g, &hp, err);
    if (s == DI_OK) {
        s = di_llama_validate_tensors(g, &hp, &lt, err);
        di_llama_tensors_free(&lt);
    }
    di_gguf_close(g);
    return s;
}

static void bad_files_fail_with_the_right_status_and_message(void **state) {
    (void)state;
    static const struct { const char *file; di_status status; const char *needle; } cases[] = {
        {"llama_arch_gpt2.gguf", DI_ERR_UNSUPPORTED, "'gpt2', supported: llama, gemma3, qwen2, qwen3, qwen3moe, phi3"},
        /* experts run now (Mixtral): expert_count alone lacks its top-k */
        {"llama_moe_experts.gguf", DI_ERR_FORMAT, "llama.expert_used_count"},
        {"llama_block_count_zero.gguf", DI_ERR_RANGE, "llama.block_count"},
        {"llama_block_count_huge.gguf", DI_ERR_RANGE, "llama.block_count"},
        {"llama_embd_missing.gguf", DI_ERR_FORMAT, "llama.embedding_length"},
        {"llama_heads_not_dividing_hidden.gguf", DI_ERR_RANGE, "does not divide"},
        {"llama_kv_heads_not_dividing_heads.gguf", DI_ERR_RANGE, "head_count_kv"},
        {"llama_head_dim_odd.gguf", DI_ERR_RANGE, "head dimension"},
        {"llama_rms_eps_nan.gguf", DI_ERR_RANGE, "layer_norm_rms_epsilon"},
        {"llama_bos_outside_vocab.gguf", DI_ERR_RANGE, "bos_token_id"},
        {"llama_unk_negative.gguf", DI_ERR_RANGE, "unknown_token_id"},
        {"llama_eot_outside_vocab.gguf", DI_ERR_RANGE, "eot_token_id"},
        {"llama_missing_ffn_down.gguf", DI_ERR_FORMAT, "blk.1.ffn_down.weight"},
        {"llama_missing_token_embd.gguf", DI_ERR_FORMAT, "token_embd.weight"},
        {"llama_shape_attn_q.gguf", DI_ERR_FORMAT, "blk.0.attn_q.weight"},
        {"llama_shape_ffn_down_transposed.gguf", DI_ERR_FORMAT, "expected [8, 4]"},
        {"llama_tensor_unknown_name.gguf", DI_ERR_UNSUPPORTED, "blk.0.attn_q.bias"},
        {"llama_tensor_layer_out_of_range.gguf", DI_ERR_FORMAT, "blk.2.attn_q.weight"},
        {"llama_vocab_size_smaller_than_tokens.gguf", DI_ERR_RANGE, "llama.vocab_size"},
        {"llama_gemma3_tensor_in_llama.gguf", DI_ERR_UNSUPPORTED, "blk.0.attn_q_norm.weight"},
        {"llama_gemma3_missing_q_norm.gguf", DI_ERR_FORMAT, "blk.1.attn_q_norm.weight"},
        {"llama_gemma3_missing_post_ffw_norm.gguf", DI_ERR_FORMAT, "blk.0.post_ffw_norm.weight"},
        {"llama_gemma3_attn_softcap.gguf", DI_ERR_UNSUPPORTED, "'gemma3.attn_logit_softcapping'"},
        {"llama_gemma3_block_count_zero.gguf", DI_ERR_RANGE, "'gemma3.block_count'"},
        {"llama_gemma3_window_pattern_zero.gguf", DI_ERR_RANGE, "'gemma3.attention.sliding_window_pattern'"},
        /* the other variants (issue 31): each one's own tensors and keys */
        {"llama_arch_qwen2moe.gguf", DI_ERR_UNSUPPORTED, "'qwen2moe', supported: llama, gemma3, qwen2"},
        {"llama_qwen2_missing_k_bias.gguf", DI_ERR_FORMAT, "required tensor 'blk.1.attn_k.bias' is missing"},
        {"llama_qwen2_shape_v_bias.gguf", DI_ERR_FORMAT, "tensor 'blk.0.attn_v.bias' has shape [3, 1, 1, 1], expected [2, 1]"},
        {"llama_qwen3_missing_k_norm.gguf", DI_ERR_FORMAT, "'blk.0.attn_k_norm.weight' is missing"},
        {"llama_qwen3_bias_in_qwen3.gguf", DI_ERR_UNSUPPORTED, "'blk.0.attn_q.bias' is not part of the qwen3"},
        {"llama_qwen3moe_missing_expert_count.gguf", DI_ERR_FORMAT, "'qwen3moe.expert_count' is missing"},
        {"llama_qwen3moe_used_more_than_experts.gguf", DI_ERR_RANGE, "'qwen3moe.expert_used_count' is 5, expected 1..4"},
        {"llama_qwen3moe_shared_experts.gguf", DI_ERR_UNSUPPORTED, "'qwen3moe.expert_shared_count'"},
        {"llama_qwen3moe_shape_down_exps.gguf", DI_ERR_FORMAT, "'blk.1.ffn_down_exps.weight' has shape [4, 4, 3, 1], expected [4, 4, 4]"},
        {"llama_qwen3moe_dense_ffn_tensor.gguf", DI_ERR_UNSUPPORTED, "'blk.0.ffn_gate.weight' is not part of the qwen3moe architecture with experts"},
        {"llama_mixtral_missing_gate_inp.gguf", DI_ERR_FORMAT, "'blk.1.ffn_gate_inp.weight' is missing"},
        {"llama_mixtral_expert_count_huge.gguf", DI_ERR_RANGE, "'llama.expert_count'"},
        {"llama_phi3_shape_qkv.gguf", DI_ERR_FORMAT, "'blk.0.attn_qkv.weight' has shape [4, 6, 1, 1], expected [4, 8]"},
        {"llama_phi3_missing_fused_up.gguf", DI_ERR_FORMAT, "'blk.1.ffn_up.weight' is missing"},
        {"llama_phi3_separate_q.gguf", DI_ERR_UNSUPPORTED, "'blk.0.attn_q.weight' is not part of the phi3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        di_error err = {0};
        di_status s = validate_file(cases[i].file, &err);
        if (s != cases[i].status || !strstr(err.msg, cases[i].needle))
            print_error("%s: status %d, message '%s'\n", cases[i].file, s, err.msg);
        assert_int_equal(s, cases[i].status);
        assert_non_null(strstr(err.msg, cases[i].needle));
        assert_non_null(strstr(err.msg, cases[i].file)); /* names the file */
    }
}

static void vocab_only_llama_passes_hparams_but_not_tensors(void **state) {
    (void)state;
    char path[4096];
    di_gguf *g = NULL;
    di_error err = {0};
    if (di_gguf_open(di_test_data(path, sizeof path, "tokenizer/ggml-vocab-llama-spm.gguf"),
                     &g, &err) != DI_OK)
        fail_msg("%s: %s", path, err.msg);
    di_llama_hparams hp;
    di_llama_tensors lt;
    assert_int_equal(di_llama_hparams_from_gguf(g, &hp, &err), DI_OK);
    assert_int_equal(hp.n_vocab, 32000);
    assert_int_equal(di_llama_validate_tensors(g, &hp, &lt, &err), DI_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "token_embd.weight"));
    di_llama_tensors_free(&lt);
    di_gguf_close(g);
}

static void validate_refuses_unchecked_hparams(void **state) {
    (void)state;
    di_gguf *g = open_rel("tests/data/seeds/gguf/tiny_llama.gguf");
    di_llama_hparams hp;
    memset(&hp, 0, sizeof hp);
    di_llama_tensors lt;
    di_error err = {0};
    assert_int_equal(di_llama_validate_tensors(g, &hp, &lt, &err), DI_ERR_INVALID_ARG);
    di_llama_tensors_free(&lt);
    di_gguf_close(g);
}

/* A valid tiny gemma3 file: keys under "gemma3.", the four extra norms
 * bound, the layer kinds from the window pattern. */
static void tiny_gemma3_reads_back(void **state) {
    (void)state;
    di_gguf *g = open_rel("tests/data/seeds/gguf/tiny_gemma3.gguf");
    di_llama_hparams hp;
    di_llama_tensors lt;
    di_error err;
    assert_int_equal(di_llama_hparams_from_gguf(g, &hp, &err), DI_OK);
    assert_int_equal(hp.arch, DI_LLAMA_ARCH_GEMMA3);
    assert_int_equal(hp.sliding_window, 4);
    assert_int_equal(hp.swa_period, 2);
    assert_true(di_llama_layer_is_local(&hp, 0) && !di_llama_layer_is_local(&hp, 1));
    assert_true(hp.embd_scale == sqrtf((float)hp.n_embd) && hp.rope_freq_base_swa == 10000.0f);
    assert_int_equal(di_llama_validate_tensors(g, &hp, &lt, &err), DI_OK);
    for (uint32_t il = 0; il < hp.n_layers; il++)
        assert_true(lt.layers[il].attn_q_norm && lt.layers[il].attn_k_norm && lt.layers[il].post_attention_norm &&
                    lt.layers[il].post_ffw_norm);
    di_llama_tensors_free(&lt);
    di_gguf_close(g);
}

/* The seeds of the other variants validate, with each one's own tensors
 * in its slots and the expert keys read under the file's prefix. */
static void tiny_variants_read_back(void **state) {
    (void)state;
    static const struct { const char *file; di_llama_arch arch; uint32_t experts; } cases[] = {
        {"tiny_qwen2.gguf", DI_LLAMA_ARCH_QWEN2, 0},
        {"tiny_qwen3moe.gguf", DI_LLAMA_ARCH_QWEN3MOE, 4},
        {"tiny_mixtral.gguf", DI_LLAMA_ARCH_LLAMA, 4},
        {"tiny_phi3.gguf", DI_LLAMA_ARCH_PHI3, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/seeds/gguf/%s", cases[i].file);
        di_gguf *g = open_rel(rel);
        di_llama_hparams hp;
        di_llama_tensors lt;
        di_error err = {0};
        assert_int_equal(di_llama_hparams_from_gguf(g, &hp, &err), DI_OK);
        assert_int_equal(hp.arch, cases[i].arch);
        assert_int_equal(hp.n_expert, cases[i].experts);
        if (cases[i].experts) {
            assert_int_equal(hp.n_expert_used, 2);
            assert_int_equal(hp.n_ff_exp, cases[i].arch == DI_LLAMA_ARCH_QWEN3MOE ? 4 : hp.n_ff);
            assert_true(hp.expert_weights_norm);
        }
        di_status s = di_llama_validate_tensors(g, &hp, &lt, &err);
        if (s) fprintf(stderr, "%s: %s\n", cases[i].file, err.msg);
        assert_int_equal(s, DI_OK);
        const di_llama_layer_tensors *l = &lt.layers[1];
        switch (cases[i].arch) {
        case DI_LLAMA_ARCH_QWEN2: assert_true(l->attn_q_b && l->attn_k_b && l->attn_v_b && l->ffn_gate); break;
        case DI_LLAMA_ARCH_PHI3: assert_true(l->attn_qkv && !l->attn_q && !l->ffn_gate && l->ffn_up); break;
        default: assert_true(l->ffn_gate_inp && l->ffn_gate_exps && l->ffn_up_exps && l->ffn_down_exps && !l->ffn_gate);
        }
        di_llama_tensors_free(&lt);
        di_gguf_close(g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_llama_hparams_read_back),
        cmocka_unit_test(validation_fills_layer_pointers),
        cmocka_unit_test(optional_keys_default_and_untied_output),
        cmocka_unit_test(bad_files_fail_with_the_right_status_and_message),
        cmocka_unit_test(vocab_only_llama_passes_hparams_but_not_tensors),
        cmocka_unit_test(validate_refuses_unchecked_hparams),
        cmocka_unit_test(tiny_gemma3_reads_back),
        cmocka_unit_test(tiny_variants_read_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
