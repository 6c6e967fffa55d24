/* The engine's disk tier: glue between the scheduler's di_kv_tier hooks,
 * the model's block bytes (di_model_kv_block_read/write) and the record
 * files of kv/disk_tier.h. Records are versioned by di_kv_model_id over the
 * model file(s) and a flavor string naming everything else that changes the
 * KV bits (architecture, kernel table, numerics, KV dtype, block size).
 *
 * Ownership: di_engine_tier_open allocates, di_engine_tier_free releases;
 * the kv cache is borrowed and must outlive the tier. Used on the engine's
 * stepping thread only (through the scheduler). */
#ifndef DI_ENGINE_KV_TIER_H
#define DI_ENGINE_KV_TIER_H

#include "engine/scheduler.h"
#include "kv/disk_tier.h"
#include "model/model.h"

typedef struct di_engine_tier di_engine_tier;

di_status di_engine_tier_open(const char *dir, uint64_t max_bytes, const char *model_path,
                              const char *flavor, di_model_kv *kv, int32_t block_size,
                              di_engine_tier **out, di_error *err);
void di_engine_tier_free(di_engine_tier *t);

/* The hooks for di_scheduler_config.tier. */
di_kv_tier di_engine_tier_hooks(di_engine_tier *t);

void di_engine_tier_get_stats(const di_engine_tier *t, di_kv_disk_stats *out);
/* The model id records are stamped with (the same for every engine that
 * loads the same model with the same flavor). */
di_kv_key di_engine_tier_model_id(const di_engine_tier *t);

#endif
