/* The device side of cuda_api.h emulated on the host, for tests on
 * machines without a GPU: the CUDA plugin's shim linked with this file
 * (build/tests/plugins/libkv_cuda_emu.so) runs the per-element code of
 * cuda_elem.h -- the code the GPU runs -- in plain loops.
 *
 * Its "device memory" is host memory behind an address bias (as SIM's),
 * so a shim that hands a host pointer to a kernel, or host code that
 * reads device memory, fails loudly instead of working by accident. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_elem.h"

#define EMU_BIAS ((uintptr_t)0x0052000000000000ull)
#define EMU_MASK ((uintptr_t)0xffff000000000000ull)

static _Thread_local char emu_error[256];

static int emu_fail(const char *what, const void *p) {
    snprintf(emu_error, sizeof emu_error, "%s: %p is not a device address", what, p);
    return 1;
}

const char *kvc_last_error(void) { return emu_error; }
const char *kvc_impl_name(void) { return "cuda-emu"; }
int kvc_impl_is_emulation(void) { return 1; }

int kvc_probe(char *reason, size_t cap) {
    (void)reason;
    (void)cap;
    return 1;
}

static bool emu_is_dev(const void *p) { return ((uintptr_t)p & EMU_MASK) == EMU_BIAS; }
static void *emu_host(const void *p) { return (void *)((uintptr_t)p - EMU_BIAS); }

/* Translates a device address in place; NULL stays NULL. */
static int emu_map(const char *what, const void **p) {
    if (*p == NULL) return 0;
    if (!emu_is_dev(*p)) return emu_fail(what, *p);
    *p = emu_host(*p);
    return 0;
}
#define MAP(what, field) emu_map(what, (const void **)&(field))

void *kvc_alloc(size_t nbytes) {
    size_t r = (nbytes + 63u) & ~(size_t)63u;
    if (r < nbytes) return NULL;
    void *p = aligned_alloc(64, r ? r : 64);
    return p ? (void *)((uintptr_t)p + EMU_BIAS) : NULL;
}

void kvc_free(void *p) {
    if (p != NULL && emu_is_dev(p)) free(emu_host(p));
}

int kvc_copy_h2d(void *dst, const void *src, size_t n) {
    if (!emu_is_dev(dst)) return emu_fail("copy to device", dst);
    memcpy(emu_host(dst), src, n);
    return 0;
}

int kvc_copy_d2h(void *dst, const void *src, size_t n) {
    if (!emu_is_dev(src)) return emu_fail("copy to host", src);
    memcpy(dst, emu_host(src), n);
    return 0;
}

int kvc_copy_d2d(void *dst, const void *src, size_t n) {
    if (!emu_is_dev(dst)) return emu_fail("copy on device", dst);
    if (!emu_is_dev(src)) return emu_fail("copy on device", src);
    memmove(emu_host(dst), emu_host(src), n);
    return 0;
}

int kvc_memset(void *dst, int byte, size_t n) {
    if (!emu_is_dev(dst)) return emu_fail("memset", dst);
    memset(emu_host(dst), byte, n);
    return 0;
}

int kvc_synchronize(void) { return 0; }

int kvc_unary(const kvc_unary_args *a) {
    kvc_unary_args h = *a;
    if (MAP("unary out", h.out) || MAP("unary in", h.in)) return 1;
    for (int64_t i = 0; i < h.n; i++) kvc_unary_one(&h, i);
    return 0;
}

int kvc_binary(const kvc_binary_args *a) {
    kvc_binary_args h = *a;
    if (MAP("binary out", h.out) || MAP("binary a", h.a) || MAP("binary b", h.b)) return 1;
    for (int64_t i = 0; i < h.n; i++) kvc_binary_one(&h, i);
    return 0;
}

int kvc_copy(const kvc_copy_args *a) {
    kvc_copy_args h = *a;
    if (MAP("copy out", h.out) || MAP("copy in", h.in)) return 1;
    for (int64_t i = 0; i < h.n; i++) kvc_copy_one(&h, i);
    return 0;
}

int kvc_masked_fill(const kvc_masked_fill_args *a) {
    kvc_masked_fill_args h = *a;
    if (MAP("masked_fill out", h.out) || MAP("masked_fill mask", h.mask) || MAP("masked_fill src", h.src)) return 1;
    for (int64_t i = 0; i < h.n; i++) kvc_masked_fill_one(&h, i);
    return 0;
}

int kvc_bernoulli(const kvc_bernoulli_args *a) {
    kvc_bernoulli_args h = *a;
    if (MAP("bernoulli out", h.out)) return 1;
    for (int64_t i = 0; i < h.n; i++) kvc_bernoulli_one(&h, i);
    return 0;
}

int kvc_reduce(const kvc_reduce_args *a) {
    kvc_reduce_args h = *a;
    if (MAP("reduce out", h.out) || MAP("reduce in", h.in)) return 1;
    for (int64_t o = 0; o < h.nout; o++) kvc_reduce_one(&h, o);
    return 0;
}

int kvc_mm(const kvc_mm_args *a) {
    kvc_mm_args h = *a;
    if (MAP("mm out", h.out) || MAP("mm a", h.a) || MAP("mm b", h.b) || MAP("mm self", h.self)) return 1;
    for (int64_t i = 0; i < h.batch * h.n * h.m; i++) kvc_mm_one(&h, i);
    return 0;
}

int kvc_softmax(const kvc_softmax_args *a) {
    kvc_softmax_args h = *a;
    if (MAP("softmax out", h.out) || MAP("softmax in", h.in)) return 1;
    for (int64_t s = 0; s < h.nslices; s++) kvc_softmax_one(&h, s);
    return 0;
}

int kvc_layer_norm(const kvc_layer_norm_args *a) {
    kvc_layer_norm_args h = *a;
    if (MAP("layer_norm out", h.out) || MAP("layer_norm x", h.x) || MAP("layer_norm w", h.w) ||
        MAP("layer_norm b", h.b) || MAP("layer_norm mean", h.mean) || MAP("layer_norm rstd", h.rstd))
        return 1;
    for (int64_t r = 0; r < h.rows; r++) kvc_layer_norm_one(&h, r);
    return 0;
}
