/* llama architecture: hyper-parameters and weight validation from a GGUF.
 * The other families are the same block with pieces switched on
 * (di_llama_arch): Gemma 3 (extra norms and a few constants: the gemma
 * fields), Qwen 2 / 2.5 (q/k/v biases), Qwen 3 (per-head q/k RMSNorm),
 * Qwen3-MoE and Mixtral (routed experts instead of the dense FFN: the
 * expert fields), Phi-3 (fused qkv and gate-up).
 *
 * Two steps, both pure validation over an open di_gguf (nothing is copied):
 *   1. di_llama_hparams_from_gguf reads and range-checks the hyper-parameters
 *      (`general.architecture` must be one of di_llama_arch_list()).
 *   2. di_llama_validate_tensors checks that every tensor the architecture
 *      needs is present with the shape the hyper-parameters imply, that no
 *      unknown tensor is present, and fills a di_llama_tensors with pointers
 *      into the GGUF. After it succeeds the forward pass can trust every
 *      shape and bind weights straight from the struct.
 *
 * Shapes are in ggml order: ne[0] is the contiguous (input) dimension, so a
 * matrix mapping d_in -> d_out has ne = [d_in, d_out] (d_out rows of d_in).
 * The tensors point into the di_gguf; it must outlive them. */
#ifndef DI_MODEL_LLAMA_HPARAMS_H
#define DI_MODEL_LLAMA_HPARAMS_H

#include "base/status.h"
#include "format/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upper bounds that no real llama model reaches; beyond them a value is a
 * corrupt or hostile file, and capping keeps derived sizes far from overflow. */
#define DI_LLAMA_MAX_LAYERS 1024u
#define DI_LLAMA_MAX_EMBD (1u << 16)      /* hidden size */
#define DI_LLAMA_MAX_HEADS 1024u
#define DI_LLAMA_MAX_HEAD_DIM 1024u
#define DI_LLAMA_MAX_FF (1u << 18)        /* feed-forward width */
#define DI_LLAMA_MAX_VOCAB (1u << 24)
#define DI_LLAMA_MAX_CTX (1u << 24)

/* The variant of the block (one forward, model/llama.c, switches on it). */
typedef enum di_llama_arch {
    DI_LLAMA_ARCH_LLAMA = 0, /* llama, SmolLM2, Mistral, Mixtral (experts), ...: keys "llama.*" */
    DI_LLAMA_ARCH_GEMMA3,    /* Gemma 3: keys "gemma3.*", q/k norms, post norms, GeGLU, local layers */
    DI_LLAMA_ARCH_QWEN2,     /* Qwen 2 / 2.5: q/k/v biases, NEOX RoPE */
    DI_LLAMA_ARCH_QWEN3,     /* Qwen 3: q/k per-head RMSNorm, no biases, NEOX RoPE */
    DI_LLAMA_ARCH_QWEN3MOE,  /* Qwen3-MoE: qwen3's attention, routed experts (no shared one) */
    DI_LLAMA_ARCH_PHI3,      /* Phi-3 / 3.5: fused qkv and gate-up, NEOX RoPE */
    DI_LLAMA_ARCH_COUNT
} di_llama_arch;

/* Largest expert count and top-k accepted (Qwen3-235B has 128, DeepSeek 256). */
#define DI_LLAMA_MAX_EXPERTS 512u

typedef enum di_llama_rope_scaling {
    DI_LLAMA_ROPE_SCALING_NONE = 0,
    DI_LLAMA_ROPE_SCALING_LINEAR,
    DI_LLAMA_ROPE_SCALING_YARN,
} di_llama_rope_scaling;

/* Special token ids; -1 when the file does not set one. All ids that are set
 * lie in [0, n_tokens) (or [0, n_vocab) when the file has no token list). */
typedef struct di_llama_special_tokens {
    int32_t bos, eos, unk, pad, sep, eot, eom;
} di_llama_special_tokens;

typedef struct di_llama_hparams {
    di_llama_arch arch;    /* general.architecture; key prefix of every "llama.*" below */
    uint32_t n_layers;     /* llama.block_count */
    uint32_t n_embd;       /* llama.embedding_length (hidden size) */
    uint32_t n_heads;      /* llama.attention.head_count */
    uint32_t n_heads_kv;   /* llama.attention.head_count_kv (default n_heads) */
    uint32_t head_dim;     /* llama.attention.key_length, default n_embd / n_heads */
    uint32_t n_ff;         /* llama.feed_forward_length */
    uint32_t n_ctx_train;  /* llama.context_length */
    uint32_t n_vocab;      /* rows of token_embd: llama.vocab_size, else n_tokens */
    uint32_t n_tokens;     /* length of tokenizer.ggml.tokens; 0 when absent */
    uint32_t n_rot;        /* llama.rope.dimension_count (default head_dim), even */
    float rope_freq_base;  /* llama.rope.freq_base (default 10000) */
    float rms_eps;         /* llama.attention.layer_norm_rms_epsilon */
    di_llama_rope_scaling rope_scaling;  /* llama.rope.scaling.type */
    float rope_scaling_factor;           /* llama.rope.scaling.factor (1 when none) */
    uint32_t rope_scaling_orig_ctx;      /* llama.rope.scaling.original_context_length */
    di_llama_special_tokens tok;
    /* Gemma 3 (llama: the neutral values) */
    float embd_scale;          /* embeddings times this: sqrt(n_embd) (llama 1) */
    float attn_scale;          /* query scale: llama.attention.scale, default 1/sqrt(head_dim) */
    float final_softcap;       /* logits = c tanh(logits / c); llama.final_logit_softcapping, 0 = none */
    uint32_t sliding_window;   /* keys a local layer sees, itself included; 0 = every layer global */
    uint32_t swa_period;       /* layer il is global when (il + 1) % swa_period == 0; 0: every
                                * layer local (llama with llama.attention.sliding_window: Mistral) */
    float rope_freq_base_swa;  /* local layers' RoPE base (gemma3 10000) */
    /* routed experts (qwen3moe, llama with llama.expert_count = Mixtral);
     * 0 experts = a dense FFN */
    uint32_t n_expert;         /* llama.expert_count */
    uint32_t n_expert_used;    /* llama.expert_used_count (top-k) */
    uint32_t n_ff_exp;         /* one expert's width: llama.expert_feed_forward_length, else n_ff */
    bool expert_weights_norm;  /* the top-k softmax weights renormalized to sum 1 */
    /* phi3 LongRoPE: q and k times this after RoPE (llama.rope.scaling.attn_factor;
     * folded into attn_scale as its square), 1 otherwise */
    float rope_attn_factor;
} di_llama_hparams;

/* Weights of one transformer block. */
typedef struct di_llama_layer_tensors {
    const di_gguf_tensor *attn_norm;   /* (n_embd) */
    /* gemma3 only (NULL for llama): per-head q/k RMSNorm weights (head_dim)
     * and the norms of the sublayer outputs (n_embd). llama.cpp's converter
     * stores Gemma's (1 + w) already added, so every norm is a plain one. */
    const di_gguf_tensor *attn_q_norm, *attn_k_norm;
    const di_gguf_tensor *post_attention_norm, *post_ffw_norm;
    const di_gguf_tensor *attn_q;      /* ne [n_embd, n_heads * head_dim] */
    const di_gguf_tensor *attn_k;      /* ne [n_embd, n_heads_kv * head_dim] */
    const di_gguf_tensor *attn_v;      /* ne [n_embd, n_heads_kv * head_dim] */
    const di_gguf_tensor *attn_output; /* ne [n_heads * head_dim, n_embd] */
    const di_gguf_tensor *ffn_norm;    /* (n_embd) */
    const di_gguf_tensor *ffn_gate;    /* ne [n_embd, n_ff] */
    const di_gguf_tensor *ffn_up;      /* ne [n_embd, n_ff] */
    const di_gguf_tensor *ffn_down;    /* ne [n_ff, n_embd] */
    /* qwen2 only: biases of the q/k/v projections (n_heads*head_dim, n_heads_kv*head_dim) */
    const di_gguf_tensor *attn_q_b, *attn_k_b, *attn_v_b;
    /* phi3 only (attn_q/k/v and ffn_gate NULL): q, k, v rows stacked, ne
     * [n_embd, (n_heads + 2 n_heads_kv) head_dim]; ffn_up holds gate then up
     * rows, ne [n_embd, 2 n_ff] */
    const di_gguf_tensor *attn_qkv;
    /* experts only (ffn_gate/up/down NULL): router ne [n_embd, n_expert];
     * per-expert matrices stacked on ne[2]: gate/up ne [n_embd, n_ff_exp,
     * n_expert], down ne [n_ff_exp, n_embd, n_expert] */
    const di_gguf_tensor *ffn_gate_inp, *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps;
} di_llama_layer_tensors;

typedef struct di_llama_tensors {
    const di_gguf_tensor *token_embd;  /* ne [n_embd, n_vocab] */
    const di_gguf_tensor *output_norm; /* (n_embd) */
    const di_gguf_tensor *output;      /* ne [n_embd, n_vocab]; == token_embd when tied */
    bool tied_output;                  /* output.weight absent: reuse token_embd */
    const di_gguf_tensor *rope_freqs;  /* (n_rot / 2) per-dim frequency factors, or NULL */
    /* phi3 LongRoPE (both or neither): (n_rot / 2) frequency divisors for
     * sequences within / past rope.scaling.original_context_length */
    const di_gguf_tensor *rope_short, *rope_long;
    uint32_t n_layers;
    di_llama_layer_tensors *layers;    /* (n_layers) owned; di_llama_tensors_free */
} di_llama_tensors;

/* Reads and range-checks the hyper-parameters. DI_ERR_UNSUPPORTED when the
 * architecture is not one of di_llama_arch_list() or uses a feature we do not run (rope
 * scaling kinds other than none/linear/yarn); DI_ERR_FORMAT for missing or
 * mistyped keys; DI_ERR_RANGE for values out of range. */
di_status di_llama_hparams_from_gguf(const di_gguf *g, di_llama_hparams *out, di_error *err);

/* Checks presence, shape and dtype of every tensor against hp and fills out
 * (caller frees with di_llama_tensors_free, also after failure). Norm weights
 * must be F32/F16/BF16. Unknown tensor names are DI_ERR_UNSUPPORTED: a weight
 * we would silently ignore means wrong output. */
di_status di_llama_validate_tensors(const di_gguf *g, const di_llama_hparams *hp,
                                    di_llama_tensors *out, di_error *err);
void di_llama_tensors_free(di_llama_tensors *t);

/* The per-layer parts table behind di_llama_validate_tensors, for loaders
 * of other layouts (model/llama_hf.c, HF folders): parts are numbered
 * 0..di_llama_part_count()-1 and named as in GGUF after "blk.<N>."
 * ("attn_q.weight"). di_llama_part_shape: whether hp's variant has the
 * part, its ne in ggml order (ne[0] = input dimension; ne[2] = experts for a
 * stacked expert matrix) and its kind (a float vector; a stack of experts).
 * di_llama_layer_slot: where the part's tensor goes in l (NULL for an
 * unknown part). */
int di_llama_part_count(void);
const char *di_llama_part_name(int part);
bool di_llama_part_shape(const di_llama_hparams *hp, int part, int64_t ne[3], bool *is_norm, bool *is_experts);
const di_gguf_tensor **di_llama_layer_slot(di_llama_layer_tensors *l, int part);

const char *di_llama_rope_scaling_name(di_llama_rope_scaling s);
const char *di_llama_arch_name(di_llama_arch a);
/* "llama, gemma3, ...": the architectures di_llama_hparams_from_gguf accepts */
const char *di_llama_arch_list(void);
/* true and *out set when name is one of them */
bool di_llama_arch_from_name(const char *name, size_t len, di_llama_arch *out);
/* the variant rotates halves (NEOX) rather than adjacent pairs */
bool di_llama_arch_rope_neox(di_llama_arch a);
/* true when layer il attends over a sliding window (Gemma 3 local layers,
 * every layer of a llama file with a window) */
bool di_llama_layer_is_local(const di_llama_hparams *hp, uint32_t il);

#endif
