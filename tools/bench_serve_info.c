/* Steps 1-3 of a `bench serve` record, discovered rather than typed in:
 *   model     the server's GET /v1/models answer (ids, owned_by, ...)
 *   engine    the Server header, our /metrics build line when the server is
 *             DeepInfer, and what the user names (--engine-name)
 *   hardware  this machine (/proc/cpuinfo, /proc/meminfo, NVIDIA driver
 *             files, the load average); it is the server's too only when the
 *             URL is loopback, which the record says. */
#include "bench_serve.h"

#include "base/alloc.h"
#include "base/status.h"

#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INFO_TIMEOUT_S 10
#define MAX_INFO_BYTES (1 << 20)
/* CPU flags that decide which kernels a CPU engine can run. */
static const char *const KEY_FLAGS[] = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
                                        "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"};

double bs_loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* Value of the first "key : value" line of a /proc file, or "". */
static void proc_field(const char *path, const char *key, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[8192];
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) || (line[kl] != ' ' && line[kl] != '\t' && line[kl] != ':')) continue;
        char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(out, cap, "%s", v);
        break;
    }
    fclose(f);
}

static json_t *hardware_json(const char *url) {
    char model[256], flags[8192], mem[64];
    proc_field("/proc/cpuinfo", "model name", model, sizeof model);
    proc_field("/proc/cpuinfo", "flags", flags, sizeof flags);
    proc_field("/proc/meminfo", "MemTotal", mem, sizeof mem);
    json_t *kf = json_array();
    for (size_t i = 0; i < sizeof KEY_FLAGS / sizeof KEY_FLAGS[0]; i++) {
        char pat[32];
        snprintf(pat, sizeof pat, " %s ", KEY_FLAGS[i]);
        char padded[8200];
        snprintf(padded, sizeof padded, " %s ", flags);
        if (strstr(padded, pat)) json_array_append_new(kf, json_string(KEY_FLAGS[i]));
    }
    /* GPUs: one folder per device under the NVIDIA driver's /proc tree */
    int n_gpu = 0;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    for (struct dirent *e; d && (e = readdir(d));) n_gpu += e->d_name[0] != '.';
    if (d) closedir(d);
    cpu_set_t set;
    long usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    bool loopback = strstr(url, "://127.") || strstr(url, "://localhost") || strstr(url, "://[::1]");
    return json_pack("{s:s, s:I, s:I, s:o, s:s, s:i, s:b, s:s}", "cpu_model", model, "cpus_online",
                     (json_int_t)sysconf(_SC_NPROCESSORS_ONLN), "cpus_usable", (json_int_t)usable,
                     "cpu_flags", kf, "memory", mem, "gpus", n_gpu, "server_on_this_machine", loopback, "nodes",
                     "one");
}

/* The first sample line of a Prometheus metric family, or NULL. */
static json_t *metrics_build(const char *text) {
    const char *p = strstr(text, "\ndeepinfer_build_info{");
    if (!p) return NULL;
    p++;
    size_t n = strcspn(p, "\n");
    return json_stringn(p, n);
}

int bs_discover(const bs_opts *o, const char *engine_name, json_t **model, json_t **engine, json_t **hardware,
                char **model_id, di_error *err) {
    *model = *engine = *hardware = NULL;
    *model_id = NULL;
    char url[1200], server[128];
    char *body = NULL;
    long code = 0;
    snprintf(url, sizeof url, "%s/v1/models", o->url);
    /* With --model given, a server that cannot be reached is measured
     * anyway: every request then counts as an error with its reason. */
    if (bs_http_get(url, o->api_key, INFO_TIMEOUT_S, MAX_INFO_BYTES, &body, &code, server, err)) {
        if (!o->model) return 1;
        fprintf(stderr, "bench serve: %s (measuring anyway)\n", err->msg);
        di_error_clear(err);
    }
    json_t *models = code == 200 && body ? json_loads(body, 0, NULL) : NULL;
    free(body);
    json_t *data = json_object_get(models, "data");
    const char *first = json_string_value(json_object_get(json_array_get(data, 0), "id"));
    if (!o->model && !first) {
        json_decref(models);
        return di_error_set(err, DI_ERR_FORMAT,
                            "%s answered HTTP %ld without a model id (not an OpenAI-compatible server?); "
                            "name the model with --model", url, code), 1;
    }
    *model_id = di_strdup(o->model ? o->model : first);
    *model = json_pack("{s:s, s:o}", "id", *model_id, "v1_models", models ? models : json_null());

    /* our /metrics carries a build line; other servers may answer 404 */
    json_t *build = NULL;
    snprintf(url, sizeof url, "%s/metrics", o->url);
    char srv2[128];
    if (!bs_http_get(url, o->api_key, INFO_TIMEOUT_S, MAX_INFO_BYTES, &body, &code, srv2, err)) {
        if (code == 200) build = metrics_build(body);
        free(body);
    }
    di_error_clear(err);
    const char *name = engine_name ? engine_name : build ? "deepinfer" : server[0] ? server : "unknown";
    *engine = json_pack("{s:s, s:s, s:s, s:o}", "name", name, "url", o->url, "server_header", server,
                        "build_info", build ? build : json_null());
    *hardware = hardware_json(o->url);
    if (!*model || !*engine || !*hardware || !*model_id) return di_error_set(err, DI_ERR_NOMEM, "record"), 1;
    return 0;
}
