/* DeepInfer public C API.
 *
 * The command line tool, the server and the benchmarks use only what is
 * declared here; tensors, kernels and the scheduler stay behind it.
 * Conventions: functions that can fail return di_status (0 = ok) and fill a
 * di_error the caller owns; out-parameters come last; every _open or _create
 * has one matching _close or _free. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DI_VERSION_STRING "0.1.0"

/* Drafts one sequence may verify per step (speculative decoding). */
#define DI_SPEC_MAX_DRAFTS 16

typedef enum di_status {
    DI_OK = 0,
    DI_ERR_IO,          /* file or socket could not be read/written */
    DI_ERR_FORMAT,      /* input is malformed (model file, JSON, ...) */
    DI_ERR_NOMEM,       /* allocation failed */
    DI_ERR_UNSUPPORTED, /* well-formed but not supported (yet) */
    DI_ERR_INVALID_ARG, /* caller passed a bad argument */
    DI_ERR_RANGE,       /* value outside its allowed range */
    DI_ERR_NOT_FOUND,   /* named item does not exist */
    DI_ERR_CANCELLED,   /* work was cancelled */
    DI_ERR_FULL,        /* a capacity (queue, KV cache, context) is exhausted */
    DI_ERR_INTERNAL,    /* a bug: an invariant did not hold */
} di_status;

/* An error: status plus a human-readable message naming what failed and why
 * (e.g. "model.gguf: tensor 'blk.0.attn_q.weight': offset past end of file"). */
typedef struct di_error {
    di_status code;
    char msg[512];
} di_error;

/* Short fixed name of a status ("invalid format"). Never NULL. */
const char *di_status_name(di_status s);

/* ---- sampling ------------------------------------------------------------
 * Per-request sampling parameters; see src/sample/sampler.h for the chain
 * order and the exact semantics of each field. */

typedef struct di_logit_bias {
    int32_t token;
    float bias; /* added to the token's logit; |bias| <= 100 */
} di_logit_bias;

typedef enum di_logprobs_mode {
    DI_LOGPROBS_PROCESSED = 0, /* after bias, mask and penalties; before temperature */
    DI_LOGPROBS_RAW = 1,       /* of the model logits as computed (vLLM v1 default) */
} di_logprobs_mode;

typedef struct di_sampling_params {
    float temperature;        /* >= 0, finite; 0 = greedy */
    int32_t top_k;            /* 0 or -1 = off; >= 1 keeps k tokens */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0, finite; 1 = off */
    float presence_penalty;   /* [-2, 2]; 0 = off */
    float frequency_penalty;  /* [-2, 2]; 0 = off */
    const di_logit_bias *logit_bias; /* (n_logit_bias), borrowed */
    size_t n_logit_bias;
    uint64_t seed;            /* keys the request's counter-based RNG */
    bool logprobs;            /* report the chosen token's logprob */
    int32_t top_logprobs;     /* 0..20 alternatives per position; needs logprobs */
    di_logprobs_mode logprobs_mode;
} di_sampling_params;

/* temperature 1, no truncation, no penalties, no bias, seed 0, no logprobs. */
di_sampling_params di_sampling_params_default(void);

/* ---- engine ---------------------------------------------------------------
 * One engine owns one model, its paged KV cache, a scheduler and a thread
 * pool. Requests are submitted (from any thread), the engine is stepped by
 * one thread (di_engine_step), and each request's tokens arrive through its
 * callback on the stepping thread. A single prompt is a batch of one. */

typedef struct di_engine di_engine;

/* Expert parallelism (MoE models: deepseek_v4) over a group of processes.
 * Each process runs its own engine and requests (attention data
 * parallelism) and owns a slice of the routed experts; steps are taken in
 * lockstep (a process with no work runs placeholder steps), and every
 * request's tokens are identical to a one-process run. */
typedef struct di_ep_params {
    int32_t n_extra_experts;   /* redundant expert slots for EPLB (rounded up to the group) */
    int32_t eplb_interval;     /* rebalance every this many steps; 0 = never */
    int32_t eplb_window;       /* steps of expert counts EPLB reads; 0 = 100 (<= interval) */
    double force_imbalance;    /* >= 1: forced routing skew toward rank 0 (load tests; changes outputs) */
    bool log;                  /* rank 0 logs each rebalance's moe_lb to stderr */
} di_ep_params;

/* Model-load progress: bytes of the model's weights read into memory so
 * far, of the total; see di_engine_params.load_progress. */
typedef void (*di_load_progress_fn)(uint64_t bytes_done, uint64_t bytes_total, void *user);

/* The transport between processes (src/dist/dist.h: one process, or MPI). */
struct di_dist;

typedef struct di_engine_params {
    const char *model_path;    /* .gguf file */
    int32_t n_threads;         /* 0 = one per CPU */
    int32_t n_ctx;             /* max prompt + completion tokens per request; 0 = model's, capped at 8192 */
    int32_t kv_tokens;         /* KV cache capacity in tokens; 0 = max(2 * n_ctx, 8192) */
    int32_t block_size;        /* tokens per KV block; 0 = 16 */
    int32_t max_batch_tokens;  /* rows per forward (token budget); 0 = 512 */
    int32_t max_seqs;          /* sequences running at once; 0 = 64 */
    /* Latency controls; they change which requests share a step, never any
     * request's output (the kernels are batch-invariant). */
    int32_t max_prefill_tokens; /* prompt rows per step at most; 0 = only
                                 * max_batch_tokens bounds them */
    double tpot_target_ms;     /* SLO mode (0 = off): admit prompt rows and
                                * new requests into a step only while its
                                * predicted time, from an online model of
                                * measured step times, stays within this;
                                * running requests still decode every step */
    bool no_prefix_cache;      /* disable reuse of cached prompt blocks */
    bool kv_f32;               /* keep the KV cache in f32 (default f16) */
    bool check_integrity;      /* verify KV accounting after every step (tests) */
    bool no_overlap;           /* fill grammar masks after the forward, in the
                                * sampling phase (default: idle pool workers
                                * fill them beside the forward; outputs are
                                * the same either way) */
    const char *kernels;       /* CPU kernel table: NULL = the model's
                                * default (quantized GGUF: the int8-
                                * activation twin "q8" of the fastest table,
                                * as llama.cpp computes, ~1 logit of rounding
                                * noise on small models; otherwise the exact
                                * f32-activation one); "exact" = the fastest
                                * exact table; "q8"; "ggml" = llama.cpp's CPU
                                * numerics (same argmaxes as llama.cpp, for
                                * comparisons); or a name ("avx2", "c-q8") */
    const char *device;        /* where the forward runs: NULL or "cpu" (the
                                * default), "cuda" or "cuda:N" (an NVIDIA GPU;
                                * this build refuses it with the reason: it
                                * has no CUDA backend yet, docs/CUDA.md);
                                * anything else is DI_ERR_INVALID_ARG */
    const char *numerics;      /* DeepSeek-V4.1 only: "deepinfer" (NULL, the
                                * default: DeepInfer's activation and KV
                                * quantization, what DeepSeek serves) or
                                * "ideal" (f32, no simulated quantization) */
    const char *kv_disk_dir;   /* disk tier of the prefix cache: blocks evicted
                                * from RAM (and all cached blocks at
                                * di_engine_free) are kept as checksummed
                                * records in this directory, found again by
                                * their prefix after a restart and by other
                                * engines of the machine; NULL = off */
    double kv_disk_max_gb;     /* cap of that directory; 0 = 16 GB */
    /* Speculative decoding (docs/SPECULATIVE.md): */
    const char *spec;          /* drafter: NULL or "off" = none, "ngram"
                                * (prompt lookup), "draft:PATH" (a smaller
                                * GGUF of the same vocabulary), "dspark" */
    int32_t spec_k;            /* drafts per sequence per step; 0 = 4, at most
                                * DI_SPEC_MAX_DRAFTS */
    const char *spec_accept;   /* "greedy" (NULL: output = output without
                                * speculation), "lossless" (min(1, p/q) with
                                * residual resampling) or "deepinfer"
                                * (DeepInfer's near-lossless residual) */
    bool spec_fixed_k;         /* dspark: every sequence verifies all its drafts
                                * (false: the verify length is scheduled from
                                * the drafts' confidences and this machine's
                                * measured step-time curve) */
    const char *spec_cost_cache; /* dspark schedule: directory caching the
                                * measured curve (an hour); NULL = the user
                                * cache dir ($XDG_CACHE_HOME or ~/.cache)/
                                * deepinfer/dspark, "off" = measure at every
                                * start-up, keep nothing */
    struct di_dist *dist;      /* expert + data parallel group (not owned; outlives
                                * the engine); NULL = this process alone */
    di_ep_params ep;           /* with dist */
    struct di_dist *cp;        /* context parallel group (not owned; dist, if set, is the same):
                                * every process runs the same requests, and steps
                                * of at least cp_min_rows rows are split over them */
    int32_t cp_min_rows;       /* 0 = 256 */
    double image_cache_mb;     /* encoded-image cache (vision models): the tower's
                                * rows of images seen, by their bytes, so a
                                * repeated image is not re-encoded even when the
                                * prefix cache misses; LRU within this many MB.
                                * 0 = 256 MB, < 0 = off */
    int32_t bounded_replay;    /* DeepSeek-V4.1 SWA bounded replay in prefill
                                * (docs/BOUNDED_REPLAY.md): 0 = off (exact);
                                * N > 0 = the decoder layers run on the last N
                                * prompt rows only (N >= the model's window);
                                * -1 = the default, window + 6 as DeepInfer's
                                * compact mode. Other models refuse it. No
                                * prompt_logprobs, no cp with it */
    /* Model load. A GGUF is mapped, not read: without pre-touch its pages
     * are faulted in by the first forward (on a cold page cache, seconds
     * of disk reads inside the first request). Pre-touch reads one byte
     * per page of the weights during di_engine_create instead
     * (madvise(WILLNEED) ahead), so that time is spent, and can be shown,
     * at load. It is skipped for files larger than half the physical
     * memory and for HF checkpoint folders (read and converted at load
     * anyway); it never fails a load. */
    int32_t pretouch;          /* 0 = when load_progress is set, 1 = always, -1 = never */
    di_load_progress_fn load_progress; /* NULL = none; called on the creating
                                * thread: (0, total) first, then every 16 MiB,
                                * (total, total) last; only when pre-touch runs */
    void *load_progress_user;  /* passed to load_progress */
} di_engine_params;

di_engine_params di_engine_params_default(void);

di_status di_engine_create(const di_engine_params *p, di_engine **out, di_error *err);
void di_engine_free(di_engine *e);

typedef struct di_message {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content; /* UTF-8 */
} di_message;

typedef enum di_finish {
    DI_FINISH_REASON_NONE = 0, /* still generating */
    DI_FINISH_REASON_STOP,     /* end-of-generation token, stop token or stop string */
    DI_FINISH_REASON_LENGTH,   /* max_tokens reached */
    DI_FINISH_REASON_CANCEL,   /* cancelled (di_engine_cancel or callback) */
    DI_FINISH_REASON_ERROR,    /* the engine failed this request; see message */
} di_finish;

typedef struct di_token_prob {
    int32_t token;
    float logprob;
} di_token_prob;

/* Per-request timing and counts, complete in the final event. */
typedef struct di_request_stats {
    int32_t n_prompt;          /* prompt tokens */
    int32_t n_generated;       /* completion tokens */
    int32_t n_cached;          /* prompt tokens served from the prefix cache */
    int32_t n_preemptions;
    double t_queued_ms;        /* submit -> first forward that included it */
    double t_first_token_ms;   /* submit -> first token (TTFT) */
    double t_total_ms;         /* submit -> finish */
} di_request_stats;

/* One event of a request: a new token (text may be empty while bytes are
 * held back for UTF-8 or a possible stop string) and/or its end. Every
 * pointer in it (text, top, error, tokens, prompt_*) is borrowed for the
 * duration of the callback only: copy what must outlive it. */
typedef struct di_event {
    int64_t request_id;
    void *user;
    int32_t token;             /* the sampled token, -1 in a final event without one */
    const char *text;          /* (text_len) new UTF-8 text, not NUL-terminated */
    size_t text_len;
    float logprob;             /* when requested */
    int32_t n_top;
    const di_token_prob *top;  /* (n_top) alternatives, by logprob desc */
    di_finish finish;          /* != NONE in the request's last event */
    const char *error;         /* finish == ERROR: why (borrowed: copy it) */
    const int32_t *tokens;     /* final event: (n_tokens) all completion tokens */
    int32_t n_tokens;
    di_request_stats stats;    /* final event */
    /* Final event of a request with prompt_logprobs: entry i is about prompt
     * token i + 1 (the first token has no prediction). NULL / 0 otherwise. */
    const float *prompt_logprobs;  /* (n_prompt_logprobs) log p(prompt[i+1] | prompt[0..i]) */
    const int32_t *prompt_argmax;  /* (n_prompt_logprobs) argmax of the logits there
                                      (the lowest id on ties) */
    int32_t n_prompt_logprobs;     /* n_prompt - 1 */
} di_event;

/* Return non-zero to cancel the request (its final event still follows). */
typedef int (*di_event_fn)(const di_event *ev);

/* Structured output: the completion must match a grammar (see
 * src/grammar/grammar.h). Tokens the grammar forbids are masked before
 * sampling; the request stops when the grammar is complete and nothing can
 * follow, or at an end-of-generation token the grammar accepts. */
typedef enum di_constraint_kind {
    DI_CONSTRAINT_NONE = 0,
    DI_CONSTRAINT_JSON_SCHEMA, /* text: a JSON Schema (draft 2020-12 / 7) */
    DI_CONSTRAINT_JSON_OBJECT, /* any JSON object; text unused */
    DI_CONSTRAINT_REGEX,       /* text: a regex (JSON Schema pattern dialect), full match */
    DI_CONSTRAINT_EBNF,        /* text: GBNF grammar with a `root` rule */
    /* text: required tool calls, {"syntax": "dsml_v4"|"dsml_v41", "parallel":
     * bool, "tools": [{"name", "parameters"}]} (di_grammar_compile_tool_calls);
     * the output may hold the call syntax's special tokens */
    DI_CONSTRAINT_TOOL_CALLS,
} di_constraint_kind;

typedef struct di_constraint {
    di_constraint_kind kind;
    const char *text;          /* NUL-terminated; copied/compiled at submit */
    bool flexible_whitespace;  /* JSON: allow whitespace between tokens */
    bool lenient;              /* JSON Schema: ignore unsupported keywords */
} di_constraint;

/* One image of a request, for models with a vision tower (DeepSeek-V4.1):
 * encoded PNG / JPEG / WebP bytes, read during di_engine_submit. */
typedef struct di_image_input {
    const void *data;
    size_t n_bytes;
} di_image_input;

typedef struct di_request {
    /* The prompt: exactly one of messages (chat template applied), text
     * (raw: tokenized as is, BOS per the model), or tokens. */
    const di_message *messages;
    size_t n_messages;
    const char *chat_template;   /* NULL = the model's own ("chatml", "llama3", ...) */
    const char *text;
    const int32_t *tokens;
    size_t n_tokens;
    int32_t max_tokens;          /* >= 1; 0 = up to the context limit */
    di_sampling_params sampling;
    const char *const *stop;     /* (n_stop) stop strings, copied */
    size_t n_stop;
    const int32_t *stop_tokens;  /* (n_stop_tokens) extra stop ids, copied */
    size_t n_stop_tokens;
    bool ignore_eos;             /* do not stop on end-of-generation tokens */
    di_constraint constraint;    /* structured output; kind NONE = free text */
    /* Teacher forcing (vLLM's prompt_logprobs): score every prompt token
     * after the first against the model's raw logits (log-softmax in double,
     * no bias, penalties or temperature) and report the argmax there; both
     * arrive in the final event. Every prompt row is then computed (no
     * prefix-cache reuse) and carries logits, which costs the output
     * projection per prompt token and up to max_batch_tokens * n_vocab
     * floats of logits memory. Generation proceeds as usual after the prompt. */
    bool prompt_logprobs;
    /* Images (n_images, at most 16): the prompt holds the model's image
     * placeholder (di_engine_image_placeholder) once per image, in order;
     * each becomes the image's rows (DeepSeek: start, rows + newlines, end).
     * Not with prompt_logprobs. Refused (DI_ERR_UNSUPPORTED) by a model
     * without a vision tower; a bad image is DI_ERR_FORMAT / RANGE. */
    const di_image_input *images;
    size_t n_images;
    /* Output text keeps the text of special tokens (DeepSeek's </think> and
     * DSML markers, which the server's output parser reads); EOS/stop
     * tokens still end the output unseen. */
    bool render_special;
    /* Test mode only (deepinfer serve --test-scripted-output): the sampled
     * tokens are replaced by forced_tokens[0..n) in order (each still costs
     * its forward), then the output ends as at an end-of-sequence token
     * (finish STOP; that last sample is not part of the output). Lets
     * protocol tests script what a tiny checkpoint "says". Copied. */
    const int32_t *forced_tokens;
    size_t n_forced_tokens;
    di_event_fn on_event;        /* may be NULL */
    void *user;
} di_request;

/* Validates and queues a request; thread-safe. Refused at once (and nothing
 * else affected) when it can never fit: DI_ERR_RANGE past the context,
 * DI_ERR_FULL past the KV cache; a constraint that does not compile is
 * DI_ERR_FORMAT / DI_ERR_UNSUPPORTED with the compiler's message. *id identifies it in events and cancel. */
di_status di_engine_submit(di_engine *e, const di_request *r, int64_t *id, di_error *err);
/* Cancels a queued or running request; thread-safe. Its blocks are freed at
 * the next step, which delivers its final event. DI_ERR_NOT_FOUND if unknown
 * or already finished. */
di_status di_engine_cancel(di_engine *e, int64_t id);
/* Runs one scheduler step (forward + sampling) and delivers events. One
 * thread steps an engine. A failed forward fails the requests in it (final
 * event with DI_FINISH_REASON_ERROR) and returns the error. With a dist
 * group the step is collective: every process calls it the same number of
 * times; one with no rows runs a placeholder forward while others work. */
di_status di_engine_step(di_engine *e, di_error *err);
/* No request queued or running. */
bool di_engine_idle(di_engine *e);
/* The expert + data parallel group the engine steps with (params.dist), or
 * NULL when it runs alone. */
struct di_dist *di_engine_group(di_engine *e);
/* Steps until idle; with a dist group, until every process of the group is
 * idle (all of them must call it). */
di_status di_engine_run(di_engine *e, di_error *err);

typedef struct di_engine_stats {
    int32_t n_waiting, n_running;
    int32_t kv_blocks_total, kv_blocks_free, kv_blocks_cached;
    int64_t n_steps, n_preemptions;
    int64_t n_prompt_tokens, n_prefix_hit_tokens, n_generated_tokens;
    int64_t n_requests_finished;
    int64_t n_prefill_rows;    /* prompt tokens computed so far (prefix hits excluded) */
    double t_forward_ms;       /* time spent in model forwards */
    int64_t n_deferred_steps;  /* steps that held prompt rows or new requests
                                  back for max_prefill_tokens / tpot_target_ms */
    double step_fixed_ms;      /* the step cost model: ms per step, */
    double step_decode_ms;     /* per decode row */
    double step_prefill_ms;    /* and per prompt row */
    double last_step_ms;       /* measured time of the last step */
    /* Disk tier (kv_disk_dir); zero when off. */
    bool kv_disk_on, kv_disk_writes_disabled; /* disabled after a failed write: RAM only */
    int64_t n_disk_hit_tokens;  /* prompt tokens whose KV came from disk */
    int64_t kv_disk_writes, kv_disk_write_errors, kv_disk_hits, kv_disk_misses;
    int64_t kv_disk_rejected;   /* records refused: corrupt, truncated, foreign */
    int64_t kv_disk_removed;    /* records removed to stay under the cap */
    uint64_t kv_disk_bytes;
    /* Speculative decoding (all 0 without a drafter): */
    int64_t spec_drafted;      /* draft tokens proposed by the drafter */
    int64_t spec_verified;     /* draft rows verified in a forward */
    int64_t spec_accepted;     /* drafts accepted */
    int64_t spec_verify_steps; /* (sequence, step) pairs that verified >= 1 draft */
    int64_t spec_verified_at[DI_SPEC_MAX_DRAFTS]; /* per draft position */
    int64_t spec_accepted_at[DI_SPEC_MAX_DRAFTS];
    /* Images (vision models): */
    int64_t n_image_encodes;    /* vision tower runs */
    int64_t n_image_cache_hits; /* images served from the encoded-image cache */
    int64_t image_cache_entries;
    uint64_t image_cache_bytes;
    double spec_draft_ms;      /* time spent in the drafter (propose) */
    double spec_conf_sum;      /* sum of the confidences of the drafts proposed */
    int64_t spec_plan_rows;    /* verify length schedule: draft rows it chose */
    /* Grammar masks filled ahead of sampling (0 with no_overlap): */
    int64_t n_masks_early;      /* posted before the forward */
    int64_t n_masks_overlapped; /* of those, filled by idle workers (the rest
                                   by the stepping thread after the forward) */
} di_engine_stats;

void di_engine_get_stats(di_engine *e, di_engine_stats *out);

/* Prefill -> decode transfer of a prompt's KV (thread-safe). export: the
 * cached full blocks of the longest cached prefix of tokens, serialized as
 * KV records (src/kv/kv_record.h: checksummed, stamped with the model file
 * hash and KV flavor), concatenated into *out (malloc'd, caller frees);
 * *n_blocks records. Run the prompt first (e.g. with max_tokens 1) so its
 * blocks are cached. import: checks every record (a damaged, truncated or
 * foreign one fails the call with DI_ERR_FORMAT / DI_ERR_UNSUPPORTED;
 * records before it stay imported) and caches its block, so a request with
 * that prompt takes it as a prefix hit and continues exactly as the
 * exporting engine would. Records must come in prefix order (as exported). */
di_status di_engine_export_kv(di_engine *e, const int32_t *tokens, size_t n_tokens, uint8_t **out,
                              size_t *n_out, int32_t *n_blocks, di_error *err);
di_status di_engine_import_kv(di_engine *e, const uint8_t *buf, size_t n, int32_t *n_imported,
                              int32_t *n_present, di_error *err);
/* Checks KV block accounting (all blocks free or cached when idle). */
di_status di_engine_check_integrity(di_engine *e, di_error *err);

/* ---- model facts and text helpers (thread-safe) ------------------------ */

typedef struct di_model_desc {
    const char *arch;          /* "llama", ... */
    int32_t n_vocab, n_ctx_train, n_ctx, n_layers, n_embd;
    int32_t n_threads;
    const char *kernels;       /* CPU kernel table in use ("avx2", "c") */
    const char *device;        /* backend the forward runs on ("cpu") */
} di_model_desc;

void di_engine_describe(di_engine *e, di_model_desc *out);
/* Tokenizes text (special tokens parsed when parse_special; BOS per the
 * model when add_special). *ids is malloc'd; caller frees. */
di_status di_engine_tokenize(di_engine *e, const char *text, bool add_special, bool parse_special,
                             int32_t **ids, size_t *n_ids, di_error *err);
/* Detokenizes ids into a malloc'd NUL-terminated string; caller frees. */
di_status di_engine_detokenize(di_engine *e, const int32_t *ids, size_t n_ids, char **text,
                               di_error *err);
/* The exact bytes token id decodes to on its own (control tokens give their
 * text), for per-token reports such as logprobs. Like snprintf: returns the
 * bytes written or needed, never writes past size, adds no NUL; negative
 * when id is outside the vocabulary. */
int64_t di_engine_token_piece(di_engine *e, int32_t id, char *buf, size_t size);
/* The number of prompt tokens r would have (its messages through the chat
 * template, its text with BOS per the model, or its tokens, each image
 * placeholder as the positions its image expands to), as submit counts
 * them: for callers that fit a request into the context first. Images are
 * decoded for their size; the vision tower does not run. */
di_status di_engine_count_prompt(di_engine *e, const di_request *r, size_t *n_tokens, di_error *err);
/* Compiles a constraint as submit would (the result is cached for the
 * submit that follows) and writes to notes (cap bytes, NUL-terminated, ""
 * when none) what a lenient JSON Schema compile dropped because it cannot
 * be enforced ("'uniqueItems' at #/tags; 'format' 'ipv6' at #/ip"), so the
 * caller can say so. A constraint that does not compile fails as in submit. */
di_status di_engine_check_constraint(di_engine *e, const di_constraint *c, char *notes, size_t cap,
                                     di_error *err);
/* The text of the model's image placeholder token (put it in the prompt
 * once per di_request.images entry), NULL when the model takes no images.
 * Borrowed from the engine. */
const char *di_engine_image_placeholder(di_engine *e);
/* Renders messages with the chat template (NULL = the model's). */
di_status di_engine_apply_chat(di_engine *e, const char *chat_template, const di_message *msgs,
                               size_t n_msgs, bool add_generation_prompt, char **text,
                               di_error *err);

#ifdef __cplusplus
}
#endif
#endif
