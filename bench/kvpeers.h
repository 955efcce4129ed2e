/* The libtorch side of kvpeers (kvpeers_torch.cc), callable from C: the
 * same 1-element f32 calls as kvbench's per-call section, through ATen.
 * kv/kv.h is C (stdatomic.h) and ATen is C++, so each side keeps to its
 * own file and this header holds only plain C. */
#ifndef KVPEERS_H
#define KVPEERS_H

#ifdef __cplusplus
extern "C" {
#endif

/* One thread, two 1-element f32 CPU tensors; returns a context for the
 * calls below, or NULL with a message on stderr. */
void *kvp_torch_setup(void);
void kvp_torch_add(void *ctx);  /* at::add(a, b, 1), result dropped */
void kvp_torch_add_(void *ctx); /* a.add_(b, 1) */
void kvp_torch_empty(void *ctx); /* at::empty({1}, f32), dropped */
void kvp_torch_teardown(void *ctx);
/* "libtorch 1.13.1" */
const char *kvp_torch_version(void);

#ifdef __cplusplus
}
#endif

#endif
