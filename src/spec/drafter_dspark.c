/* Registration point of DeepSeek-V4.1's DSpark drafter (`--spec dspark`).
 *
 * The drafter itself is model code (src/model/deepseek_v41_dspark*.c): it
 * reads the target-layer features that the target forward captured in
 * env->target_ctx (its after_forward hook sees each step's batch and how
 * many drafts each sequence accepted), runs the draft block, and fills
 * di_spec_drafts with tokens, q (has_q) and confidences. Until that lands
 * here, every model answers "not available". */
#include "spec/spec.h"

#include "model/model.h"

di_status di_spec_dspark_create(const di_spec_env *env, di_drafter **out, di_error *err) {
    *out = NULL;
    di_model_facts f;
    di_model_get_facts(env->target, &f);
    return di_error_set(err, DI_ERR_UNSUPPORTED, "--spec dspark: not available for this model (%s)", f.arch);
}
