/* The CPU reference kernel of an op, for plugins that run it on their own
 * memory (SIM) or reuse its metadata-only views (CUDA). The CPU key may
 * hold a perf_dispatch variant set (kv/tune.h); a plugin wants the golden
 * "ref" variant, not whichever optimized variant the tuner picks, so its
 * results stay bit-equal to the reference and never depend on timing. */
#include "backend/backend_internal.h"
#include "kv/tune.h"

kv_status kv_backend_call_reference(const kv_op *op, kv_stack *stack) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "backend: kv_backend_call_reference: argument 'op': is NULL");
    if (kv_tune_variant_find(op, KV_KEY_CPU, "ref") >= 0) return kv_tune_call_variant(op, KV_KEY_CPU, "ref", stack);
    return kv_redispatch(op, kv_keyset_of(KV_KEY_CPU), stack);
}
