/* The drafter registry: one row per drafter name (contract in spec.h). A
 * new drafter is a constructor and a row here, nothing in the engine. */
#include "spec/spec.h"

#include <string.h>

di_status di_spec_drafter_create(const char *spec, const di_spec_env *env, di_drafter **out, di_error *err) {
    *out = NULL;
    if (!spec || !env) return di_error_set(err, DI_ERR_INVALID_ARG, "spec: no drafter named");
    if (!strcmp(spec, "ngram")) return di_spec_ngram_create(env, out, err);
    if (!strcmp(spec, "dspark")) return di_spec_dspark_create(env, out, err);
    if (!strncmp(spec, "draft:", 6)) {
        if (!spec[6]) return di_error_set(err, DI_ERR_INVALID_ARG, "--spec draft:PATH: the path is empty");
        return di_spec_draft_model_create(spec + 6, env, out, err);
    }
    return di_error_set(err, DI_ERR_INVALID_ARG, "--spec '%s': expected ngram, draft:PATH, dspark or off", spec);
}

void di_drafter_free(di_drafter *d) {
    if (d) d->ops->free(d);
}
