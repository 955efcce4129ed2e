/* kv_tune_register: the CPU variant sets, installed when kv_init runs
 * (from kv_modes_register_all, after the reference kernels registered, so
 * "ref" can be taken from the CPU key). Other backends register their
 * variants with kv_tune_register_variant from their own registration. */
#include "tune/tune_internal.h"

#include "cpu/cpu.h"

kv_status kv_tune_register(void) { return kv_cpu_variants_register(); }
