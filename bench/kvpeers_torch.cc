// kvpeers' libtorch calls (kvpeers.h). C++ only because ATen is; the
// timing and the printing are kvbench's, in C (kvpeers.c).
#include "kvpeers.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstdio>
#include <exception>

namespace {
struct Ctx {
    at::Tensor a, b;
};
} // namespace

extern "C" void *kvp_torch_setup(void) {
    try {
        at::set_num_threads(1); // kvbench's per-call figures are one thread
        Ctx *c = new Ctx;
        c->a = at::ones({1}, at::kFloat);
        c->b = at::zeros({1}, at::kFloat); // a += b keeps a's value
        return c;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "kvpeers: libtorch set-up failed: %s\n", e.what());
        return nullptr;
    }
}

extern "C" void kvp_torch_add(void *p) {
    Ctx *c = static_cast<Ctx *>(p);
    at::Tensor r = at::add(c->a, c->b, 1);
    (void)r;
}

extern "C" void kvp_torch_add_(void *p) {
    Ctx *c = static_cast<Ctx *>(p);
    c->a.add_(c->b, 1);
}

extern "C" void kvp_torch_empty(void *p) {
    (void)p;
    at::Tensor r = at::empty({1}, at::kFloat);
    (void)r;
}

extern "C" void kvp_torch_teardown(void *p) { delete static_cast<Ctx *>(p); }

extern "C" const char *kvp_torch_version(void) { return "libtorch " TORCH_VERSION; }
