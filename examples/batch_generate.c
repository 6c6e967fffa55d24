/* Offline batch generation through the public API only: submit several
 * prompts, step the engine until idle, print each completion.
 *
 *   ./build/example_batch_generate models/SmolLM2-135M-Instruct.Q4_1.gguf */
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct completion {
    char text[4096];
    size_t len;
    di_finish finish;
    int n_tokens;
} completion;

/* Called on the stepping thread for every new token of a request. */
static int on_event(const di_event *ev) {
    completion *c = ev->user;
    size_t n = ev->text_len;
    if (c->len + n >= sizeof c->text) n = sizeof c->text - 1 - c->len;
    memcpy(c->text + c->len, ev->text, n);
    c->len += n;
    if (ev->finish != DI_FINISH_REASON_NONE) {
        c->finish = ev->finish;
        c->n_tokens = ev->n_tokens;
    }
    return 0; /* non-zero would cancel the request */
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    di_engine_params params = di_engine_params_default();
    params.model_path = model;
    di_engine *engine = NULL;
    di_error err;
    if (di_engine_create(&params, &engine, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const char *questions[] = {
        "What is the capital of France?",
        "Give me one tip for writing clear C code.",
        "What is 12 times 12?",
    };
    enum { N = sizeof questions / sizeof questions[0] };
    static completion out[N];
    for (int i = 0; i < N; i++) {
        di_message msg = {"user", questions[i]};
        di_request r;
        memset(&r, 0, sizeof r);
        r.messages = &msg; /* copied at submit: may live on the stack */
        r.n_messages = 1;
        r.max_tokens = 64;
        r.sampling = di_sampling_params_default();
        r.sampling.temperature = 0; /* greedy */
        r.on_event = on_event;
        r.user = &out[i];
        if (di_engine_submit(engine, &r, NULL, &err)) {
            fprintf(stderr, "submit: %s\n", err.msg);
            di_engine_free(engine);
            return 1;
        }
    }
    if (di_engine_run(engine, &err)) { /* continuous batching until all finish */
        fprintf(stderr, "run: %s\n", err.msg);
        di_engine_free(engine);
        return 1;
    }
    for (int i = 0; i < N; i++)
        printf("Q: %s\nA: %.*s\n   (%d tokens)\n\n", questions[i], (int)out[i].len, out[i].text,
               out[i].n_tokens);
    di_engine_free(engine);
    return 0;
}
