/* What a call may not do to the tensors it is given (docs/plugin-abi.md,
 * "Promises"): change an input's geometry in place (sizes, strides,
 * offset, dtype, device, storage) unless the schema marks the argument as
 * written (a!), or release a reference it does not own.
 *
 * kv_case_invoke takes a snapshot of every tensor argument before the
 * call and holds one extra reference to each, so a kernel that releases
 * an input cannot free it under the caller: after the call the count is
 * compared, the stolen references are given back, and the call fails
 * naming the kernel's backend, the input and what changed. A changed
 * geometry is put back for the same reason: every check after it reads
 * the case's inputs. A copy of a few structs per call: cheap enough for
 * every call the runner makes. */
#ifndef KV_RUNNER_INPUT_GUARD_H
#define KV_RUNNER_INPUT_GUARD_H

#include <stdbool.h>

#include "kv/dispatch.h"
#include "kv/tensor.h"
#include "runner/check/check.h"

typedef struct kv_input_snap {
    int n;
    kv_tensor *t[KV_SCHEMA_MAX_ARGS];   /* distinct tensor arguments, each retained once */
    int arg[KV_SCHEMA_MAX_ARGS];        /* its first schema argument */
    bool written[KV_SCHEMA_MAX_ARGS];   /* (a!): its geometry may change */
    kv_tensor geometry[KV_SCHEMA_MAX_ARGS];
    int refs[KV_SCHEMA_MAX_ARGS];       /* its reference count with ours */
} kv_input_snap;

/* Before the call: snapshot and retain every tensor argument of `in`. */
void kv_input_guard_take(const kv_op *op, const kv_case_inputs *in, kv_input_snap *s);
/* After the call: false when a promise was broken, with what in msg
 * ("the mul.Tensor kernel of npu changed input 0 ('self') in place: ...");
 * either way the geometry and reference counts are as before the call and
 * the extra references are dropped. `ks` is the call's key set (0: the
 * dispatcher's own choice), which names the kernel. */
bool kv_input_guard_check(const kv_op *op, kv_keyset ks, kv_input_snap *s, char *msg, int cap);

#endif
