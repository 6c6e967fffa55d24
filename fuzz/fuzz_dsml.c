/* libFuzzer target: DeepSeek conversation JSON -> V4 / V4.1 prompts, and the
 * same bytes as model output through the DSML parser in two pieces, for both
 * versions with thinking on and off (seeds: tests/data/malformed/dsml).
 * Results are ignored; only crashes, leaks, hangs and sanitizer reports
 * matter. */
#include "text/dsml.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void render(const uint8_t *data, size_t size) {
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    if (!root) return;
    di_dsml_conv *c = NULL;
    di_error err;
    if (di_dsml_conv_from_json(root, &c, &err) == DI_OK) {
        for (int v = 0; v < 2; v++) {
            di_dsml_prompt p;
            if (di_dsml_render(c, (di_dsml_version)v, &p, &err) == DI_OK) di_dsml_prompt_free(&p);
        }
        di_dsml_conv_free(c);
    }
    json_decref(root);
}

static void parse(const uint8_t *data, size_t size) {
    size_t cut = size ? data[0] % (size + 1) : 0;
    for (int k = 0; k < 4; k++) {
        di_dsml_parser *p = NULL;
        di_error err;
        if (di_dsml_parser_create((di_dsml_version)(k & 1), k & 2, true, &p, &err)) return;
        (void)di_dsml_parser_push(p, (const char *)data, cut, &err);
        (void)di_dsml_parser_push(p, (const char *)data + cut, size - cut, &err);
        (void)di_dsml_parser_finish(p, &err);
        (void)di_dsml_parser_message(p);
        di_dsml_parser_free(p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    render(data, size);
    parse(data, size);
    return 0;
}
