#include "text/tok_internal.h"
di_status di_tok_load_json(const char *path, di_tokenizer **out, di_error *err) {
    (void)path; (void)out;
    return di_error_set(err, DI_ERR_UNSUPPORTED, "todo");
}
