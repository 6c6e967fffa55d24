/* Options shared by the generating subcommands (run, chat, batch, bench):
 * the engine's sizing flags and the sampling flags, parsed once. */
#ifndef DI_TOOLS_GEN_COMMON_H
#define DI_TOOLS_GEN_COMMON_H

#include "args.h"
#include "deepinfer.h"

typedef struct di_gen_opts {
    const char *model;
    int64_t threads, ctx, kv_tokens, batch_tokens, max_seqs, max_prefill_tokens, max_tokens, top_k, seed;
    double temp, top_p, min_p, repeat_penalty, tpot_target_ms;
    bool no_prefix_cache, kv_f32, no_overlap;
    const char *kv_disk;   /* --kv-disk DIR: disk tier of the prefix cache */
    double kv_disk_max_gb; /* --kv-disk-max-gb */
    const char *kernels; /* kernel table name, NULL = the default exact one */
    const char *device;  /* --device cpu|cuda[:N], NULL = cpu */
    const char *numerics; /* DeepSeek-V4.1 numerics policy, NULL = deepinfer */
    /* expert + data parallelism under mpirun (--ep) */
    bool ep, eplb_log;
    int64_t ep_extra, eplb_interval, eplb_window;
    /* context parallelism of long prefills under mpirun (--cp) */
    bool cp;
    int64_t cp_min_rows;
    double ep_force_imbalance, ep_timeout_s;
    /* speculative decoding */
    const char *spec, *spec_accept, *spec_cost_cache;
    int64_t spec_k;
    int64_t bounded_replay; /* --bounded-replay[=KEEP]: 0 off, -1 the default keep */
    bool spec_fixed_k;
    double image_cache_mb; /* --image-cache-mb: < 0 unset (the engine's default), 0 off */
} di_gen_opts;

/* Fills defaults: the default model path, greedy-ish sampling tuned for the
 * small default model. */
void di_gen_opts_defaults(di_gen_opts *o);
/* Room for the shared flags plus a command's own: the size of every specs
 * array passed to di_gen_opts_specs. */
#define DI_GEN_MAX_SPECS 64
/* Appends the shared flag specs to specs (returns the new count). */
int di_gen_opts_specs(di_gen_opts *o, di_arg *specs, int n);
di_engine_params di_gen_engine_params(const di_gen_opts *o);
/* A seed for -1 (the default): random, or fixed under --ep (replicas
 * must agree). Call once after parsing; the value can be printed and given
 * back with --seed. */
void di_gen_resolve_seed(di_gen_opts *o);
di_sampling_params di_gen_sampling(const di_gen_opts *o);
/* One line of speculative-decoding counts on stderr (nothing when the
 * engine drafts nothing): drafted, verified, accepted, rate, per position. */
void di_gen_print_spec_stats(di_engine *e);
/* Threads for -t N: N itself up to the CPUs this process may run on;
 * more would only time-slice one core between spinning workers, so N
 * above that is capped with a warning on stderr naming cmd. 0 stays 0
 * (the engine's one per CPU). */
int32_t di_gen_cap_threads(const char *cmd, int64_t threads);
/* The default model's path when -m is not given: $DEEPINFER_MODEL, else
 * the first readable of models/ (cwd), models/ of the checkout holding
 * the binary, the user cache ($DEEPINFER_CACHE or ~/.cache/deepinfer) and
 * PREFIX/share/deepinfer/models. NULL (after printing every place it
 * looked) when none has it. The string is static or the environment's. */
const char *di_gen_resolve_model(const char *cmd);
/* Creates the engine (resolving o->model when NULL), printing a one-line
 * reason on failure (returns NULL). */
di_engine *di_gen_engine_open(const char *cmd, di_gen_opts *o);
/* With --ep it first joins the MPI job (one group for the whole process). */
/* Frees the engine, then leaves the MPI job if --ep joined one. */
void di_gen_engine_close(di_engine *e);
/* This process's rank and the group size (0 and 1 without --ep). */
int di_gen_rank(void);
int di_gen_ranks(void);
/* The group (NULL without --ep), for commands that split work over it. */
struct di_dist *di_gen_dist(void);

/* Image files for --image / batch "images": reads each (at most 20 MiB)
 * into in[i] (data malloc'd; di_gen_images_free) and returns the engine's
 * placeholder repeated n times followed by text (malloc'd), or NULL with a
 * message in msg (the model takes no images, a file is unreadable). */
char *di_gen_images_prompt(di_engine *e, const char *const *files, size_t n, const char *text, di_image_input *in,
                           char *msg, size_t msg_size);
void di_gen_images_free(di_image_input *in, size_t n);

#endif
