#include "gen_common.h"

#include "progress.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include "dist/dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The embedded default model: scripts/fetch-model.sh puts it in models/ of
 * the checkout and in the user cache, `make install` under the prefix. */
#define DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
#ifndef DI_INSTALL_PREFIX
#define DI_INSTALL_PREFIX "/usr/local"
#endif
#define MODEL_PATH_MAX 4096

/* The MPI group of this process (--ep): one per process, made by the first
 * engine that asks for it, ended by di_gen_engine_close. */
static di_dist *g_dist;
/* SmolLM2's model card suggests a low temperature with nucleus sampling. */
#define DEFAULT_TEMP 0.2
#define DEFAULT_TOP_P 0.9
/* Replicas under --ep / --cp must sample alike: there the default seed is fixed. */
#define EP_DEFAULT_SEED 42
#define DEFAULT_MAX_TOKENS 256

void di_gen_opts_defaults(di_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->model = NULL; /* resolved by di_gen_resolve_model */
    o->temp = DEFAULT_TEMP;
    o->top_p = DEFAULT_TOP_P;
    o->seed = -1; /* random: see di_gen_resolve_seed */
    o->max_tokens = DEFAULT_MAX_TOKENS;
    o->repeat_penalty = 1.0;
    o->image_cache_mb = -1;
}

int di_gen_opts_specs(di_gen_opts *o, di_arg *s, int n) {
    const di_arg add[] = {
        {"-m", "--model", DI_ARG_STR, &o->model, 0, 0, "model: a .gguf file or an HF checkpoint folder (default: the embedded SmolLM2-135M-Instruct)"},
        {"-n", "--max-tokens", DI_ARG_INT, &o->max_tokens, 1, 1 << 20, "tokens to generate at most"},
        {"-t", "--threads", DI_ARG_INT, &o->threads, 0, 1024, "threads (0 = one per CPU)"},
        {"-c", "--ctx", DI_ARG_INT, &o->ctx, 0, 1 << 20, "context per request (0 = model's, capped)"},
        {"--kv-tokens", NULL, DI_ARG_INT, &o->kv_tokens, 0, 1 << 26, "KV cache capacity in tokens (0 = twice the context, at least 8192)"},
        {"--batch-tokens", "--max-batched-tokens", DI_ARG_INT, &o->batch_tokens, 0, 1 << 20,
         "rows per forward: the step's token budget (0 = 512)"},
        {"--max-seqs", "--max-num-seqs", DI_ARG_INT, &o->max_seqs, 0, 4096, "sequences running at once (0 = 64)"},
        {"--max-prefill-tokens", NULL, DI_ARG_INT, &o->max_prefill_tokens, 0, 1 << 20,
         "prompt rows per step at most, to protect decode latency (0 = budget only)"},
        {"--tpot-target-ms", NULL, DI_ARG_FLOAT, &o->tpot_target_ms, 0, 1e6,
         "SLO mode: admit prompt rows / new requests only while the predicted step time fits (0 = off)"},
        {"--temp", NULL, DI_ARG_FLOAT, &o->temp, 0, 100, "temperature (0 = greedy)"},
        {"--top-p", NULL, DI_ARG_FLOAT, &o->top_p, 1e-6, 1, "nucleus sampling mass"},
        {"--top-k", NULL, DI_ARG_INT, &o->top_k, 0, 1 << 24, "keep the k most likely (0 = off)"},
        {"--min-p", NULL, DI_ARG_FLOAT, &o->min_p, 0, 1, "min-p truncation (0 = off)"},
        {"--repeat-penalty", NULL, DI_ARG_FLOAT, &o->repeat_penalty, 1e-3, 100, "repetition penalty"},
        {"--seed", NULL, DI_ARG_INT, &o->seed, 0, 9.0e15,
         "sampling seed (random unless given, so runs differ; -v prints it)"},
        {"--no-prefix-cache", NULL, DI_ARG_FLAG, &o->no_prefix_cache, 0, 0, "do not reuse cached prompts"},
        {"--kv-f32", NULL, DI_ARG_FLAG, &o->kv_f32, 0, 0, "keep the KV cache in f32"},
        {"--no-overlap", NULL, DI_ARG_FLAG, &o->no_overlap, 0, 0,
         "fill grammar masks after the forward, not beside it in idle threads (same outputs)"},
        {"--kv-disk", NULL, DI_ARG_STR, &o->kv_disk, 0, 0,
         "keep prefix-cache blocks evicted from RAM in DIR (survives restarts, shared by engines)"},
        {"--kv-disk-max-gb", NULL, DI_ARG_FLOAT, &o->kv_disk_max_gb, 0, 1e9, "cap of --kv-disk (0 = 16 GB)"},
        {"--kernels", NULL, DI_ARG_STR, &o->kernels, 0, 0,
         "kernel table: exact (f32 activations), q8 (int8 activations), ggml (llama.cpp's numerics), or a table "
         "name (default: q8 for quantized GGUF models, else exact)"},
        {"--device", NULL, DI_ARG_STR, &o->device, 0, 0,
         "where the forward runs: cpu (default), cuda or cuda:N (this build: cpu only)"},
        {"--image-cache-mb", NULL, DI_ARG_FLOAT, &o->image_cache_mb, 0, 1 << 20,
         "vision models: encoded images kept for reuse, in MB (default 256; 0 = off)"},
        {"--numerics", NULL, DI_ARG_STR, &o->numerics, 0, 0,
         "DeepSeek-V4.1: deepinfer (default: DeepInfer's quantization) or ideal (f32)"},
        {"--spec", NULL, DI_ARG_STR, &o->spec, 0, 0,
         "speculative decoding: ngram (prompt lookup), draft:PATH (same-vocabulary GGUF), dspark, off"},
        {"--spec-k", NULL, DI_ARG_INT, &o->spec_k, 0, DI_SPEC_MAX_DRAFTS, "--spec: drafts per sequence per step (4)"},
        {"--spec-accept", NULL, DI_ARG_STR, &o->spec_accept, 0, 0,
         "--spec: greedy (output unchanged), lossless (min(1,p/q), residual resampling) or deepinfer"},
        {"--spec-fixed-k", NULL, DI_ARG_FLAG, &o->spec_fixed_k, 0, 0,
         "--spec dspark: verify every draft (no confidence-scheduled verify length)"},
        {"--spec-cost-cache", NULL, DI_ARG_STR, &o->spec_cost_cache, 0, 0,
         "--spec dspark: where the measured step-time curve is cached (default: ~/.cache/deepinfer/dspark; off)"},
        {"--ep", NULL, DI_ARG_FLAG, &o->ep, 0, 0,
         "expert + data parallel over the MPI job (run under mpirun; MoE models)"},
        {"--ep-extra-experts", NULL, DI_ARG_INT, &o->ep_extra, 0, 1 << 16, "--ep: redundant expert slots for EPLB"},
        {"--eplb-interval", NULL, DI_ARG_INT, &o->eplb_interval, 0, 1 << 30,
         "--ep: rebalance experts every N steps (0 = never)"},
        {"--eplb-window", NULL, DI_ARG_INT, &o->eplb_window, 0, 1 << 20, "--ep: steps of expert counts (0 = 100)"},
        {"--eplb-log", NULL, DI_ARG_FLAG, &o->eplb_log, 0, 0, "--ep: log moe_lb at each rebalance"},
        {"--ep-force-imbalance", NULL, DI_ARG_FLOAT, &o->ep_force_imbalance, 0, 1000,
         "--ep: route with rank 0's experts this much hotter (0 = off; >= 1 for load tests, changes outputs)"},
        {"--ep-timeout", NULL, DI_ARG_FLOAT, &o->ep_timeout_s, 0, 86400,
         "--ep/--cp: end the job when an exchange waits this many seconds (0 = 300; above the slowest step)"},
        {"--cp", NULL, DI_ARG_FLAG, &o->cp, 0, 0,
         "context parallel prefill over the MPI job (run under mpirun; deepseek_v4): every rank runs the same "
         "requests, long prefills are split over the ranks"},
        {"--bounded-replay", NULL, DI_ARG_OPT_INT, &o->bounded_replay, 1, 1 << 24,
         "DeepSeek-V4.1: prefill the decoder layers on the last KEEP prompt rows only (default window + 6; "
         "approximate, faster long prompts)"},
        {"--cp-min-rows", NULL, DI_ARG_INT, &o->cp_min_rows, 1, 1 << 20,
         "--cp: split steps of at least this many rows (256); smaller ones run whole on every rank"},
    };
    for (size_t i = 0; i < sizeof add / sizeof add[0]; i++) s[n++] = add[i];
    return n;
}

di_engine_params di_gen_engine_params(const di_gen_opts *o) {
    di_engine_params p = di_engine_params_default();
    p.model_path = o->model;
    p.n_threads = (int32_t)o->threads;
    p.n_ctx = (int32_t)o->ctx;
    p.kv_tokens = (int32_t)o->kv_tokens;
    p.max_batch_tokens = (int32_t)o->batch_tokens;
    p.max_seqs = (int32_t)o->max_seqs;
    p.max_prefill_tokens = (int32_t)o->max_prefill_tokens;
    p.tpot_target_ms = o->tpot_target_ms;
    p.no_prefix_cache = o->no_prefix_cache;
    p.kv_f32 = o->kv_f32;
    p.no_overlap = o->no_overlap;
    p.kv_disk_dir = o->kv_disk;
    p.kv_disk_max_gb = o->kv_disk_max_gb;
    p.kernels = o->kernels;
    p.device = o->device;
    p.numerics = o->numerics;
    p.dist = o->ep ? g_dist : NULL;
    p.cp = o->cp ? g_dist : NULL;
    p.cp_min_rows = (int32_t)o->cp_min_rows;
    p.spec = o->spec;
    p.spec_k = (int32_t)o->spec_k;
    p.spec_accept = o->spec_accept;
    p.bounded_replay = (int32_t)o->bounded_replay;
    p.spec_fixed_k = o->spec_fixed_k;
    p.spec_cost_cache = o->spec_cost_cache;
    if (o->image_cache_mb >= 0) p.image_cache_mb = o->image_cache_mb > 0 ? o->image_cache_mb : -1;
    p.ep = (di_ep_params){.n_extra_experts = (int32_t)o->ep_extra, .eplb_interval = (int32_t)o->eplb_interval,
                          .eplb_window = (int32_t)o->eplb_window, .force_imbalance = o->ep_force_imbalance,
                          .log = o->eplb_log};
    return p;
}

void di_gen_resolve_seed(di_gen_opts *o) {
    if (o->seed >= 0) return;
    if (o->ep || o->cp) {
        o->seed = EP_DEFAULT_SEED;
        return;
    }
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
    }
    o->seed = (int64_t)(r % 9000000000000000ull); /* within --seed's range, so it can be given back */
}

di_sampling_params di_gen_sampling(const di_gen_opts *o) {
    di_sampling_params s = di_sampling_params_default();
    s.temperature = (float)o->temp;
    s.top_p = (float)o->top_p;
    s.top_k = (int32_t)o->top_k;
    s.min_p = (float)o->min_p;
    s.repetition_penalty = (float)o->repeat_penalty;
    s.seed = o->seed >= 0 ? (uint64_t)o->seed : EP_DEFAULT_SEED; /* unresolved: fixed */
    return s;
}

void di_gen_print_spec_stats(di_engine *e) {
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    if (st.spec_drafted == 0 && st.spec_verified == 0) return;
    fprintf(stderr, "[spec: drafted %lld, verified %lld, accepted %lld (%.1f%%), %.2f tokens per verify step | "
                    "accepted per position:",
            (long long)st.spec_drafted, (long long)st.spec_verified, (long long)st.spec_accepted,
            st.spec_verified ? 100.0 * (double)st.spec_accepted / (double)st.spec_verified : 0.0,
            st.spec_verify_steps ? 1.0 + (double)st.spec_accepted / (double)st.spec_verify_steps : 0.0);
    for (int i = 0; i < DI_SPEC_MAX_DRAFTS && st.spec_verified_at[i]; i++)
        fprintf(stderr, " %lld/%lld", (long long)st.spec_accepted_at[i], (long long)st.spec_verified_at[i]);
    fprintf(stderr, "]\n");
}

int32_t di_gen_cap_threads(const char *cmd, int64_t threads) {
    cpu_set_t set;
    long n_cpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    if (n_cpu < 1) n_cpu = 1;
    if (threads <= n_cpu) return (int32_t)threads;
    fprintf(stderr, "deepinfer %s: warning: -t %lld is more than the %ld CPUs available; using %ld\n", cmd,
            (long long)threads, n_cpu, n_cpu);
    return (int32_t)n_cpu;
}

static bool readable(const char *path) { return access(path, R_OK) == 0; }

const char *di_gen_resolve_model(const char *cmd) {
    static char found[MODEL_PATH_MAX];
    const char *env = getenv("DEEPINFER_MODEL");
    if (env && env[0]) return env; /* the user's choice: errors name it */
    char cand[5][MODEL_PATH_MAX];
    int n = 0;
    snprintf(cand[n++], MODEL_PATH_MAX, "models/%s", DEFAULT_MODEL_FILE);
    /* the checkout the binary was built in: <root>/build/deepinfer */
    char exe[MODEL_PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(cand[n++], MODEL_PATH_MAX, "%.3000s/../models/%s", exe, DEFAULT_MODEL_FILE);
    }
    const char *cache = getenv("DEEPINFER_CACHE"), *home = getenv("HOME");
    if (cache && cache[0]) snprintf(cand[n++], MODEL_PATH_MAX, "%.3000s/%s", cache, DEFAULT_MODEL_FILE);
    else if (home && home[0]) snprintf(cand[n++], MODEL_PATH_MAX, "%.3000s/.cache/deepinfer/%s", home, DEFAULT_MODEL_FILE);
    snprintf(cand[n++], MODEL_PATH_MAX, "%s/share/deepinfer/models/%s", DI_INSTALL_PREFIX, DEFAULT_MODEL_FILE);
    for (int i = 0; i < n; i++)
        if (readable(cand[i])) {
            memcpy(found, cand[i], sizeof found);
            return found;
        }
    fprintf(stderr, "deepinfer %s: no -m MODEL given and the default model %s is not in any of:\n"
                    "  $DEEPINFER_MODEL (unset)\n", cmd, DEFAULT_MODEL_FILE);
    for (int i = 0; i < n; i++) fprintf(stderr, "  %s\n", cand[i]);
    fprintf(stderr, "fetch it with scripts/fetch-model.sh (make model), or give -m MODEL\n");
    return NULL;
}

#define DEFAULT_EP_TIMEOUT_S 300.0 /* longer than any step: a peer silent this long is hung */

di_engine *di_gen_engine_open(const char *cmd, di_gen_opts *o) {
    if (!o->model && !(o->model = di_gen_resolve_model(cmd))) return NULL;
    di_error err;
    if (o->cp && strcmp(cmd, "run") && strcmp(cmd, "batch")) {
        fprintf(stderr, "deepinfer %s: --cp works with run and batch\n", cmd);
        return NULL;
    }
    if ((o->ep || o->cp) && !g_dist) {
        if (strcmp(cmd, "run") && strcmp(cmd, "batch") && strcmp(cmd, "serve")) {
            fprintf(stderr, "deepinfer %s: --ep works with run, batch and serve\n", cmd);
            return NULL;
        }
#ifdef DI_HAVE_MPI
        if (di_dist_mpi_create(NULL, NULL, o->ep_timeout_s > 0 ? o->ep_timeout_s : DEFAULT_EP_TIMEOUT_S, &g_dist,
                               &err)) {
            fprintf(stderr, "deepinfer %s: --ep: %s\n", cmd, err.msg);
            return NULL;
        }
        /* one seed for the group: ranks that run the same request (run,
         * --cp) must sample alike */
        int64_t seed = o->seed;
        if (di_dist_allreduce_i64(g_dist, &seed, 1, DI_DIST_MAX, &err)) {
            fprintf(stderr, "deepinfer %s: --ep: %s\n", cmd, err.msg);
            return NULL;
        }
        o->seed = seed;
#else
        fprintf(stderr, "deepinfer %s: --ep: this deepinfer was built without MPI (install Open MPI and rebuild)\n",
                cmd);
        return NULL;
#endif
    }
    di_engine_params p = di_gen_engine_params(o);
    p.n_threads = di_gen_cap_threads(cmd, o->threads);
    di_progress load;
    if (!g_dist || g_dist->rank == 0) di_progress_load_hook(&p, &load); /* one bar per terminal */
    di_engine *e = NULL;
    if (di_engine_create(&p, &e, &err)) {
        const char *env = getenv("DEEPINFER_MODEL");
        bool from_env = env && o->model == env;
        if (g_dist)
            fprintf(stderr, "deepinfer %s: rank %d: %s%s\n", cmd, (int)g_dist->rank, err.msg,
                    from_env ? " (the model $DEEPINFER_MODEL names)" : "");
        else
            fprintf(stderr, "deepinfer %s: %s%s\n", cmd, err.msg, from_env ? " (the model $DEEPINFER_MODEL names)" : "");
        return NULL;
    }
    return e;
}

void di_gen_engine_close(di_engine *e) {
    di_engine_free(e);
    di_dist_free(g_dist);
    g_dist = NULL;
}

int di_gen_rank(void) { return g_dist ? g_dist->rank : 0; }
int di_gen_ranks(void) { return g_dist ? g_dist->size : 1; }
struct di_dist *di_gen_dist(void) { return g_dist; }

#define GEN_MAX_IMAGE_BYTES (20u << 20)

char *di_gen_images_prompt(di_engine *e, const char *const *files, size_t n, const char *text, di_image_input *in,
                           char *msg, size_t msg_size) {
    const char *ph = di_engine_image_placeholder(e);
    for (size_t i = 0; i < n; i++) in[i] = (di_image_input){NULL, 0};
    if (!ph) {
        snprintf(msg, msg_size, "this model takes no images (no vision tower)");
        return NULL;
    }
    size_t len = strlen(text) + 1;
    for (size_t i = 0; i < n; i++) {
        FILE *f = fopen(files[i], "rb");
        uint8_t *buf = f ? malloc(GEN_MAX_IMAGE_BYTES + 1) : NULL;
        size_t got = buf ? fread(buf, 1, GEN_MAX_IMAGE_BYTES + 1, f) : 0;
        if (f) fclose(f);
        if (!buf || got == 0 || got > GEN_MAX_IMAGE_BYTES) {
            snprintf(msg, msg_size, "image %s: %s", files[i],
                     !f ? "cannot open" : !buf ? "out of memory" : got ? "over 20 MiB" : "empty or unreadable");
            free(buf);
            di_gen_images_free(in, n);
            return NULL;
        }
        in[i] = (di_image_input){buf, got};
        len += strlen(ph);
    }
    char *p = malloc(len);
    if (!p) {
        snprintf(msg, msg_size, "out of memory");
        di_gen_images_free(in, n);
        return NULL;
    }
    p[0] = 0;
    for (size_t i = 0; i < n; i++) strcat(p, ph);
    strcat(p, text);
    return p;
}

void di_gen_images_free(di_image_input *in, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((void *)in[i].data);
        in[i] = (di_image_input){NULL, 0};
    }
}
