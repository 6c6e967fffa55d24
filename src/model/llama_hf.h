/* HF checkpoint folders of the llama family: config.json + *.safetensors
 * (one file, or shards listed by model.safetensors.index.json; f32, f16 or
 * bf16 weights), bound to the same di_llama_model the GGUF path builds, so
 * the one llama forward (model/llama.c) runs them.
 *
 *   architectures[0]      variant (llama_hparams.h)
 *   LlamaForCausalLM      llama     (rope_scaling none / linear / llama3)
 *   MistralForCausalLM    llama     (sliding_window)
 *   MixtralForCausalLM    llama     + experts (block_sparse_moe.experts.N.w1/w2/w3)
 *   Qwen2ForCausalLM      qwen2     (q/k/v biases)
 *   Qwen3ForCausalLM      qwen3     (q/k head norms)
 *   Qwen3MoeForCausalLM   qwen3moe  (mlp.experts.N.*)
 *   Phi3ForCausalLM       phi3      (fused qkv_proj / gate_up_proj, LongRoPE)
 *   Gemma3ForCausalLM     gemma3    (norms stored as w, applied as 1 + w)
 *
 * HF keeps q/k rows in the layout of rotate_half (NEOX), for every family;
 * llama.cpp's converter permutes llama's for adjacent pairs, the HF loader
 * does not: the model rotates halves instead. The config's keys are mapped
 * to di_llama_hparams as llama.cpp's converter maps them to GGUF keys, the
 * tensors to the GGUF parts of llama_tensors.c's table; every expected
 * tensor is checked for presence, shape and dtype, and an unknown tensor is
 * refused (rotary_emb.inv_freq buffers, which old checkpoints carry, are
 * skipped), each message naming the HF tensor or config key.
 *
 * Weights point into the checkpoint's mapping except: expert matrices (HF
 * stores one tensor per expert; the forward wants each stack contiguous:
 * copied once), Gemma's norms (1 + w, in f32), tensors whose data is not
 * 4-byte aligned, and the RoPE factor tables computed from the config
 * (llama3 rope_scaling, LongRoPE). Those live in the di_llama_hf holder,
 * which must outlive the model. */
#ifndef DI_MODEL_LLAMA_HF_H
#define DI_MODEL_LLAMA_HF_H

#include "base/status.h"
#include "kernels/cpu/kernels.h"
#include "model/llama.h"

#include <stdbool.h>

typedef struct di_llama_hf di_llama_hf;

/* "LlamaForCausalLM, MistralForCausalLM, ...": the architectures loaded here */
const char *di_llama_hf_arch_list(void);

/* Reads dir/config.json: *is_llama when its architectures[0] is one of
 * di_llama_hf_arch_list(). DI_ERR_UNSUPPORTED (the message names the
 * architecture and lists the supported ones, DeepSeek's included) when it
 * names another architecture that is not DeepSeek's either; DI_OK with
 * *is_llama false when the folder is DeepSeek's or has no readable config
 * (the DeepSeek loaders then say what is wrong). */
di_status di_llama_hf_probe(const char *dir, bool *is_llama, di_error *err);

/* Loads the folder's config and weights. kernels NULL: the best exact
 * table. On success the caller owns *holder and *model: free the model
 * first (di_llama_free), then the holder. */
di_status di_llama_hf_load(const char *dir, const di_cpu_kernels *kernels, di_llama_hf **holder,
                           di_llama_model **model, di_error *err);
void di_llama_hf_free(di_llama_hf *h);

#endif
