/* Argument edge coverage, enforced: for every op of kernels/ops.schema,
 * every schema argument is exercised by the suite (cases/) with its
 * boundary and non-default values, on the cpu AND on the accel device
 * (the accel twins come from cases/accel.case; each case brings its
 * backends and variants with it). The value classes an argument needs are
 * derived from its schema type (and, for the few integer roles a type
 * cannot tell apart, from its name), so a newly added op is checked
 * without anyone editing this file:
 *
 *   type / role                   value classes it needs
 *   Tensor, Tensor(a!) self       0-dim, empty (a zero-size dim), non-contiguous (layout t/s/o),
 *                                 broadcast (layout b: stride 0 over a dim > 1; the overlapping view),
 *                                 overlapping (not stride 0) (layout w where it applies: dim-0 rows
 *                                 that share storage, unfold windows with step < size)
 *   Tensor?                       the Tensor classes, and present, absent (None)
 *   Tensor[]                      the Tensor classes on some element, one element, several elements
 *   Tensor(a!) out (kwarg-only)   sized, empty (resized, PyTorch's out= rule), non-contiguous,
 *                                 aliases an input (--out=@N: passing where PyTorch allows it, else
 *                                 the expected error);
 *                                 a broadcast or 0-dim out is not required (PyTorch refuses writes
 *                                 to overlapping memory; 0-dim is a sized out)
 *   int dim / dim0 / dim1 /       non-negative, negative (passing cases), out of range (a case that
 *   dimension / int[] dims          expects an error with a dim outside [-R, R-1], R the rank of the
 *                                 first input, at least 1 as PyTorch wraps 0-dim tensors as one dim)
 *   int index (with a dim)        negative (passing), out of range (expected error)
 *   SymInt? start / end (slice)   present, absent, negative, beyond the bounds (|v| > the dim's size:
 *                                 clamped, passing)
 *   SymInt step beside start/end  step > 1 (passing), negative step refused (an expected error)
 *   int step beside int size      windows: step < size, step = size, step > size (passing)
 *   other int / SymInt            non-default (and default) when it has a default; present/absent
 *                                 when optional; otherwise any value
 *   int[] / SymInt[] (sizes)      empty list [], a 0 entry, a negative entry (-1 inferred or refused)
 *   float                         zero, non-zero
 *   bool                          true, false (absent too when optional)
 *   Scalar                        integer, floating, negative, zero (present/absent when optional)
 *   str                           every value in the string table below, and an unknown one refused
 *   ScalarType                    every dtype (absent too when optional)
 *   MemoryFormat                  every memory format (absent too when optional)
 *   Layout                        strided (absent too when optional)
 *   Device                        present; Device? only absent (the case's device= chooses where a
 *                                 factory's result lives; needs_of says why)
 *
 * A class is met by any case of the op that has it, passing or expecting
 * an error, except where the table says "passing" or "expected error".
 * When PyTorch (or kvsuite, with a clear error) refuses a value, the case
 * expects that error: the class is still exercised. The few places where a
 * class cannot apply are listed in `exceptions` with the reason; nothing
 * else is skipped. A future type (e.g. Generator) is a new kv_type_kind:
 * the switches below have no default, so the compiler asks for its row.
 *
 * The test fails naming the op, the argument, its type, the value class
 * and the device that has no case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "runner/case/case_args.h"
#include "test_util.h"

/* ---- the tables ---- */

/* The values of str arguments, by argument name: the schema types them as
 * plain str, so the set of meaningful values has to be written down (a
 * str argument missing here fails the test, naming it). */
typedef struct str_values {
    const char *arg;
    const char *values[6];
} str_values;

static const str_values str_table[] = {
    { "approximate", { "none", "tanh", NULL } },            /* gelu, gelu_backward */
    { "reduction", { "none", "mean", "sum", NULL } },       /* loss ops, when they come */
};

/* Ops whose dim arguments range over the RESULT's rank (one more than the
 * first input's): a new dim may be inserted after the last one. */
static const char *const dim_rank_plus_one[] = { "unsqueeze", "stack" };

/* Ops whose dim indexes a sizes list argument instead of a tensor: the
 * backward ops get the forward input's sizes as a list. */
typedef struct dim_rank_from {
    const char *op;
    const char *list_arg;
} dim_rank_from;

static const dim_rank_from dim_rank_lists[] = {
    { "unfold_backward", "input_sizes" },
    { "index_select_backward", "self_sizes" },
};

/* The value class of a partially overlapping input that is not stride 0. */
#define CLASS_OVERLAP "overlapping (not stride 0)"
/* The value class of an out that is one of the inputs (--out=@N[.t]). */
#define CLASS_OUT_ALIAS "aliases an input"

/* Where a value class cannot apply, and why. */
typedef struct exception {
    const char *op;
    const char *arg;
    const char *cls;
    const char *why;
} exception;

static const exception exceptions[] = {
    { "as_strided", "self", "non-contiguous",
      "as_strided addresses its input's storage directly, ignoring its strides: the result depends on the layout "
      "by definition" },
    { "as_strided", "self", "broadcast",
      "as_strided addresses its input's storage directly: a broadcast input's storage holds one slice, so the "
      "result depends on the layout by definition" },
    { "as_strided", "self", CLASS_OVERLAP,
      "as_strided addresses its input's storage directly: a windowed input's storage is shorter than its "
      "elements, so the result depends on the layout by definition" },
    /* Layout w needs two dims (one stride never revisits an element): an
     * argument that must be 1-D has no overlapping view. */
    { "index_select", "index", CLASS_OVERLAP, "index must be 1-D or 0-D (PyTorch refuses more dims)" },
    { "index_select_backward", "index", CLASS_OVERLAP, "index must be 1-D or 0-D, as index_select's" },
    { "native_group_norm", "weight", CLASS_OVERLAP, "weight must be 1-D of size C" },
    { "native_group_norm", "bias", CLASS_OVERLAP, "bias must be 1-D of size C" },
};

/* ---- value classes of one case ---- */

enum { DEV_CPU = 1u, DEV_ACCEL = 2u };

#define MAX_CLASSES 48
#define CLASS_MAX 48

typedef struct arg_hits {
    char label[MAX_CLASSES][CLASS_MAX];
    unsigned devs[MAX_CLASSES];
    int n;
} arg_hits;

static void hit(arg_hits *h, unsigned dev, const char *label) {
    for (int i = 0; i < h->n; i++) {
        if (strcmp(h->label[i], label) == 0) {
            h->devs[i] |= dev;
            return;
        }
    }
    if (h->n == MAX_CLASSES) fail_msg("too many value classes for one argument (%s)", label);
    snprintf(h->label[h->n], CLASS_MAX, "%s", label);
    h->devs[h->n++] = dev;
}

static unsigned hits_of(const arg_hits *h, const char *label) {
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->label[i], label) == 0) return h->devs[i];
    return 0;
}

static bool name_in(const char *name, const char *const *list, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0) return true;
    return false;
}

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static bool is_dim_name(const char *name) {
    static const char *const names[] = { "dim", "dim0", "dim1", "dimension", "dims" };
    return name_in(name, names, COUNT(names));
}

static bool is_out_arg(const kv_arg *a) { return a->kwarg_only && a->alias.is_write; }

/* The value of argument `a` in case c as canonical text: the case's own,
 * else the schema default, else NULL (a required argument not given). */
static const char *arg_text(const kv_case *c, const kv_arg *a, char *buf, int cap) {
    const char *v = kv_case_arg_value(c, a->name);
    if (v != NULL) return v;
    if (a->has_default && kv_case_arg_default_text(a, buf, cap) >= 0) return buf;
    return NULL;
}

static bool parse_int(const char *text, int64_t *out) {
    if (text == NULL || text[0] == '\0') return false;
    char *end = NULL;
    const long long v = strtoll(text, &end, 10);
    if (*end != '\0') return false;
    *out = v;
    return true;
}

/* An int list "[1,-2]" (or a bare int, the spelling of int[1]). */
static int parse_ints(const char *text, int64_t *out, int cap) {
    int n = 0;
    const char *p = text;
    if (*p == '[') p++;
    while (*p && *p != ']' && n < cap) {
        char *end = NULL;
        out[n++] = strtoll(p, &end, 10);
        if (end == p) return -1;
        p = end;
        if (*p == ',') p++;
    }
    return n;
}

static int64_t int_arg(const kv_case *c, const kv_schema *s, const char *name, bool *ok) {
    const int i = kv_schema_arg_index(s, name);
    char buf[64];
    int64_t v = 0;
    *ok = i >= 0 && parse_int(arg_text(c, &s->args[i], buf, (int)sizeof buf), &v);
    return v;
}

/* The first tensor input that is present (the `self` dims index). */
static const kv_shape *first_shape(const kv_case *c) {
    for (int i = 0; i < c->ninputs; i++)
        if (!c->absent[i]) return &c->shapes[i];
    return NULL;
}

/* R: the rank a dim of this op indexes (see dim_rank_*), at least 1. */
static bool dim_rank(const kv_case *c, const kv_schema *s, int64_t *rank) {
    int64_t r = -1;
    for (int i = 0; i < COUNT(dim_rank_lists); i++) {
        if (strcmp(dim_rank_lists[i].op, c->op) != 0) continue;
        const int ai = kv_schema_arg_index(s, dim_rank_lists[i].list_arg);
        char buf[128];
        int64_t ints[KV_MAX_DIMS + 2];
        const char *t = ai >= 0 ? arg_text(c, &s->args[ai], buf, (int)sizeof buf) : NULL;
        const int n = t ? parse_ints(t, ints, COUNT(ints)) : -1;
        if (n < 0) return false;
        r = n;
    }
    if (r < 0) {
        const kv_shape *sh = first_shape(c);
        if (sh == NULL) return false;
        r = sh->ndim;
    }
    if (name_in(c->op, dim_rank_plus_one, COUNT(dim_rank_plus_one))) r++;
    *rank = r < 1 ? 1 : r;
    return true;
}

/* The size of the dim named by argument `dim_arg` of the first input. */
static bool dim_extent(const kv_case *c, const kv_schema *s, const char *dim_arg, int64_t *extent) {
    bool ok;
    int64_t d = int_arg(c, s, dim_arg, &ok);
    const kv_shape *sh = first_shape(c);
    if (!ok || sh == NULL || sh->ndim == 0) return false;
    if (d < 0) d += sh->ndim;
    if (d < 0 || d >= sh->ndim) return false;
    *extent = sh->sizes[d];
    return true;
}

/* Layout w over a shape it applies to: elements over one storage element
 * without a stride 0 (kv_layout_window_step). An out may not be such a
 * view (the write is refused), so only inputs need the class. */
static void overlap_classes(arg_hits *h, unsigned dev, kv_layout l, const kv_shape *sh, bool out) {
    if (!out && l == KV_LAYOUT_WINDOW && kv_layout_window_step(sh) > 0) hit(h, dev, CLASS_OVERLAP);
}

static void tensor_classes(arg_hits *h, unsigned dev, const kv_case *c, int input, bool out) {
    const kv_shape *sh = &c->shapes[input];
    int64_t numel = 1;
    for (int d = 0; d < sh->ndim; d++) numel *= sh->sizes[d];
    const kv_layout l = c->layouts[input];
    if (out) {
        hit(h, dev, numel == 0 ? "empty (resized)" : "sized");
    } else {
        if (sh->ndim == 0) hit(h, dev, "0-dim");
        if (numel == 0) hit(h, dev, "empty");
    }
    if ((l == KV_LAYOUT_TRANSPOSED && sh->ndim >= 2) || (l == KV_LAYOUT_STRIDED && sh->ndim >= 1) ||
        l == KV_LAYOUT_OFFSET)
        hit(h, dev, "non-contiguous");
    if (l == KV_LAYOUT_BROADCAST && sh->ndim >= 1 && sh->sizes[0] > 1) hit(h, dev, "broadcast");
    overlap_classes(h, dev, l, sh, out);
    if (out && c->out_alias > 0) hit(h, dev, CLASS_OUT_ALIAS);
}

static void scalar_classes(arg_hits *h, unsigned dev, const char *text) {
    kv_scalar sc;
    if (kv_scalar_parse(text, &sc) != 0) return;
    double re = 0.0, im = 0.0;
    kv_scalar_to_complex(sc, &re, &im);
    switch (sc.kind) {
    case KV_SCALAR_INT: hit(h, dev, "integer"); break;
    case KV_SCALAR_DOUBLE: hit(h, dev, "floating"); break;
    case KV_SCALAR_BOOL: hit(h, dev, "bool"); break;
    case KV_SCALAR_COMPLEX: hit(h, dev, "complex"); break;
    }
    if (re < 0.0) hit(h, dev, "negative");
    if (re == 0.0 && im == 0.0) hit(h, dev, "zero");
}

static void int_classes(arg_hits *h, unsigned dev, const kv_case *c, const kv_schema *s, const kv_arg *a,
                        const char *text) {
    const bool pass = c->expect == KV_OK;
    int64_t v = 0;
    if (!parse_int(text, &v)) return;
    if (is_dim_name(a->name)) {
        int64_t r;
        if (pass) hit(h, dev, v < 0 ? "negative" : "non-negative");
        if (!pass && dim_rank(c, s, &r) && (v >= r || v < -r)) hit(h, dev, "out of range");
        return;
    }
    const bool slice = kv_schema_arg_index(s, "start") >= 0 && kv_schema_arg_index(s, "end") >= 0;
    const bool window = kv_schema_arg_index(s, "size") >= 0 && strcmp(a->name, "step") == 0;
    int64_t extent = 0;
    if (strcmp(a->name, "index") == 0 && kv_schema_arg_index(s, "dim") >= 0) {
        if (pass && v < 0) hit(h, dev, "negative");
        if (!pass && dim_extent(c, s, "dim", &extent) && (v >= extent || v < -extent)) hit(h, dev, "out of range");
    } else if (slice && (strcmp(a->name, "start") == 0 || strcmp(a->name, "end") == 0)) {
        if (pass && v < 0) hit(h, dev, "negative");
        if (pass && dim_extent(c, s, "dim", &extent) && (v > extent || v < -extent)) hit(h, dev, "beyond the bounds");
    } else if (slice && strcmp(a->name, "step") == 0) {
        if (pass && v > 1) hit(h, dev, "step > 1");
        if (!pass && v < 0) hit(h, dev, "negative step refused");
    } else if (window) {
        bool ok;
        const int64_t size = int_arg(c, s, "size", &ok);
        if (ok && pass) hit(h, dev, v < size ? "step < size" : v == size ? "step = size" : "step > size");
    }
}

static void list_classes(arg_hits *h, unsigned dev, const kv_case *c, const kv_schema *s, const kv_arg *a,
                         const char *text) {
    int64_t ints[KV_CASE_ARG_MAX_INTS];
    const int n = parse_ints(text, ints, COUNT(ints));
    if (n < 0) return;
    const bool pass = c->expect == KV_OK;
    if (a->type.kind == KV_TYPE_INT && is_dim_name(a->name)) {
        int64_t r;
        const bool ranked = dim_rank(c, s, &r);
        for (int i = 0; i < n; i++) {
            if (pass) hit(h, dev, ints[i] < 0 ? "negative" : "non-negative");
            if (!pass && ranked && (ints[i] >= r || ints[i] < -r)) hit(h, dev, "out of range");
        }
        return;
    }
    if (n == 0) hit(h, dev, "empty list");
    for (int i = 0; i < n; i++) {
        if (ints[i] == 0) hit(h, dev, "a 0 entry");
        if (ints[i] < 0) hit(h, dev, "a negative entry");
    }
}

/* Every class argument `ai` of the op has in case c. */
static void case_classes(arg_hits *h, unsigned dev, const kv_case *c, const kv_schema *s, int ai) {
    const kv_arg *a = &s->args[ai];
    char label[160];
    if (a->type.kind == KV_TYPE_TENSOR) {
        int elems = 0;
        for (int i = 0; i < c->ninputs; i++) {
            if (c->input_arg[i] != ai) continue;
            elems++;
            if (c->absent[i]) {
                hit(h, dev, "absent");
                continue;
            }
            hit(h, dev, "present");
            tensor_classes(h, dev, c, i, is_out_arg(a));
        }
        if (elems == 0 && a->type.optional) hit(h, dev, "absent");
        if (a->type.is_list) hit(h, dev, elems == 1 ? "one element" : elems > 1 ? "several elements" : "no element");
        return;
    }
    char buf[128];
    const char *text = arg_text(c, a, buf, (int)sizeof buf);
    if (text == NULL) return;
    if (a->type.optional && strcmp(text, "none") == 0) {
        hit(h, dev, "absent");
        return;
    }
    hit(h, dev, "present");
    if (a->has_default) {
        char def[128];
        const bool is_default = kv_case_arg_default_text(a, def, (int)sizeof def) >= 0 && strcmp(def, text) == 0;
        hit(h, dev, is_default ? "default" : "non-default");
    }
    if (a->type.is_list) {
        list_classes(h, dev, c, s, a, text);
        return;
    }
    switch (a->type.kind) {
    case KV_TYPE_TENSOR: break;
    case KV_TYPE_INT: int_classes(h, dev, c, s, a, text); break;
    case KV_TYPE_FLOAT: hit(h, dev, strtod(text, NULL) == 0.0 ? "zero" : "non-zero"); break;
    case KV_TYPE_BOOL: hit(h, dev, strcmp(text, "1") == 0 ? "true" : "false"); break;
    case KV_TYPE_SCALAR: scalar_classes(h, dev, text); break;
    case KV_TYPE_STR: {
        bool known = false;
        for (int i = 0; i < COUNT(str_table); i++) {
            if (strcmp(str_table[i].arg, a->name) != 0) continue;
            for (int k = 0; str_table[i].values[k]; k++) known |= strcmp(str_table[i].values[k], text) == 0;
        }
        if (known) {
            snprintf(label, sizeof label, "'%s'", text);
            hit(h, dev, label);
        } else if (c->expect != KV_OK) {
            hit(h, dev, "an unknown value refused");
        }
        break;
    }
    case KV_TYPE_SCALAR_TYPE:
    case KV_TYPE_MEMORY_FORMAT:
    case KV_TYPE_LAYOUT:
        hit(h, dev, text);
        break;
    case KV_TYPE_DEVICE: break;
    case KV_TYPE_GENERATOR:
        /* "none" is the absent class; a seed alone starts a stream at
         * offset 0, SEED:OFFSET resumes one mid-stream. */
        if (strcmp(text, "none") != 0) hit(h, dev, strchr(text, ':') ? "seed:offset" : "seed");
        break;
    }
}

/* ---- the classes an argument needs ---- */

typedef struct need_list {
    const char *label[MAX_CLASSES];
    char own[MAX_CLASSES][CLASS_MAX];
    int n;
} need_list;

static void need(need_list *l, const char *label) {
    if (l->n == MAX_CLASSES) fail_msg("too many required classes (%s)", label);
    snprintf(l->own[l->n], CLASS_MAX, "%s", label);
    l->label[l->n] = l->own[l->n];
    l->n++;
}

static void needs_of(const kv_schema *s, int ai, need_list *l) {
    const kv_arg *a = &s->args[ai];
    l->n = 0;
    /* Device: the case's own device= option says where a factory makes
     * its result (the runner fills an unset device argument with it); an
     * explicit device= in args would make a row's call produce a tensor on
     * another backend than the row's (a SIM row making a cpu tensor), a
     * call dispatch never makes. So only "absent" is asked for. */
    if (a->type.optional && a->type.kind == KV_TYPE_DEVICE) {
        need(l, "absent");
        return;
    }
    if (a->type.optional) {
        need(l, "present");
        need(l, "absent");
    }
    if (a->type.kind == KV_TYPE_TENSOR) {
        if (is_out_arg(a)) {
            need(l, "sized");
            need(l, "empty (resized)");
            need(l, "non-contiguous");
            need(l, CLASS_OUT_ALIAS);
            return;
        }
        need(l, "0-dim");
        need(l, "empty");
        need(l, "non-contiguous");
        need(l, "broadcast");
        need(l, CLASS_OVERLAP);
        if (a->type.is_list) {
            need(l, "one element");
            need(l, "several elements");
        }
        return;
    }
    if (a->type.is_list) {
        if (a->type.kind == KV_TYPE_INT && is_dim_name(a->name)) {
            need(l, "non-negative");
            need(l, "negative");
            need(l, "out of range");
        } else {
            need(l, "empty list");
            need(l, "a 0 entry");
            need(l, "a negative entry");
        }
        return;
    }
    switch (a->type.kind) {
    case KV_TYPE_TENSOR: break;
    case KV_TYPE_INT: {
        const bool slice = kv_schema_arg_index(s, "start") >= 0 && kv_schema_arg_index(s, "end") >= 0;
        if (is_dim_name(a->name)) {
            need(l, "non-negative");
            need(l, "negative");
            need(l, "out of range");
        } else if (strcmp(a->name, "index") == 0 && kv_schema_arg_index(s, "dim") >= 0) {
            need(l, "negative");
            need(l, "out of range");
        } else if (slice && (strcmp(a->name, "start") == 0 || strcmp(a->name, "end") == 0)) {
            need(l, "negative");
            need(l, "beyond the bounds");
        } else if (slice && strcmp(a->name, "step") == 0) {
            need(l, "step > 1");
            need(l, "negative step refused");
        } else if (kv_schema_arg_index(s, "size") >= 0 && strcmp(a->name, "step") == 0) {
            need(l, "step < size");
            need(l, "step = size");
            need(l, "step > size");
        } else if (a->has_default && !a->type.optional) {
            need(l, "default");
            need(l, "non-default");
        } else if (!a->type.optional) {
            need(l, "present");
        }
        break;
    }
    case KV_TYPE_FLOAT:
        need(l, "zero");
        need(l, "non-zero");
        break;
    case KV_TYPE_BOOL:
        need(l, "true");
        need(l, "false");
        break;
    case KV_TYPE_SCALAR:
        need(l, "integer");
        need(l, "floating");
        need(l, "negative");
        need(l, "zero");
        break;
    case KV_TYPE_STR: {
        bool listed = false;
        char label[CLASS_MAX];
        for (int i = 0; i < COUNT(str_table); i++) {
            if (strcmp(str_table[i].arg, a->name) != 0) continue;
            listed = true;
            for (int k = 0; str_table[i].values[k]; k++) {
                snprintf(label, sizeof label, "'%s'", str_table[i].values[k]);
                need(l, label);
            }
        }
        /* Unlisted: the string table needs a row; "values listed" can
         * never be met, so the test names the argument. */
        need(l, listed ? "an unknown value refused" : "its values listed in test_arg_coverage.c's str_table");
        break;
    }
    case KV_TYPE_SCALAR_TYPE:
        for (int d = 0; d < KV_DTYPE_COUNT; d++) need(l, kv_dtype_name((kv_dtype)d));
        break;
    case KV_TYPE_MEMORY_FORMAT: {
        static const char *const formats[] = { "contiguous_format", "preserve_format", "channels_last",
                                               "channels_last_3d" };
        for (int i = 0; i < COUNT(formats); i++) need(l, formats[i]);
        break;
    }
    case KV_TYPE_LAYOUT: need(l, "strided"); break;
    case KV_TYPE_DEVICE: need(l, "present"); break;
    case KV_TYPE_GENERATOR:
        need(l, "seed");
        need(l, "seed:offset");
        break;
    }
}

/* ---- the test ---- */

static const char *exception_for(const char *op, const char *arg, const char *cls) {
    for (int i = 0; i < COUNT(exceptions); i++)
        if (strcmp(exceptions[i].op, op) == 0 && strcmp(exceptions[i].arg, arg) == 0 &&
            strcmp(exceptions[i].cls, cls) == 0)
            return exceptions[i].why;
    return NULL;
}

static void type_text(const kv_arg *a, char *buf, int cap) {
    snprintf(buf, (size_t)cap, "%s%s%s%s", kv_type_kind_name(a->type.kind), a->type.is_list ? "[]" : "",
             a->type.optional ? "?" : "", is_out_arg(a) ? " out" : a->alias.is_write ? "(a!)" : "");
}

static void test_every_argument_value_class_has_a_case(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    kv_case_list cases = { 0 };
    kv_test_load_suite(&cases);
    const int nops = kv_op_count();
    arg_hits *table = calloc((size_t)nops * KV_SCHEMA_MAX_ARGS, sizeof *table);
    assert_non_null(table);
    for (int j = 0; j < cases.n; j++) {
        const kv_case *c = &cases.items[j];
        if (c->program[0]) continue; /* programs: whole chains, not one op's arguments */
        const unsigned dev = c->device.type == KV_DEVICE_CPU ? DEV_CPU : c->device.type == KV_DEVICE_ACCEL ? DEV_ACCEL : 0;
        if (dev == 0) continue;
        int oi = -1;
        for (int i = 0; i < nops && oi < 0; i++)
            if (strcmp(kv_op_name(kv_op_at(i)), c->op) == 0) oi = i;
        if (oi < 0) continue;
        const kv_schema *s = kv_op_schema(kv_op_at(oi));
        for (int ai = 0; ai < s->nargs; ai++) case_classes(&table[oi * KV_SCHEMA_MAX_ARGS + ai], dev, c, s, ai);
    }
    int missing = 0, required = 0, excepted = 0;
    for (int oi = 0; oi < nops; oi++) {
        const kv_schema *s = kv_op_schema(kv_op_at(oi));
        for (int ai = 0; ai < s->nargs; ai++) {
            need_list l;
            needs_of(s, ai, &l);
            const arg_hits *h = &table[oi * KV_SCHEMA_MAX_ARGS + ai];
            for (int k = 0; k < l.n; k++) {
                required++;
                if (exception_for(s->full_name, s->args[ai].name, l.label[k]) != NULL) {
                    excepted++;
                    continue;
                }
                const unsigned got = hits_of(h, l.label[k]);
                if ((got & (DEV_CPU | DEV_ACCEL)) == (DEV_CPU | DEV_ACCEL)) continue;
                char ty[64];
                type_text(&s->args[ai], ty, (int)sizeof ty);
                print_message("op %s: argument '%s' (%s): value class '%s' has no case on %s\n", s->full_name,
                              s->args[ai].name, ty, l.label[k],
                              got == 0 ? "cpu or accel" : (got & DEV_CPU) ? "accel" : "cpu");
                missing++;
            }
        }
    }
    print_message("%d ops, %d (op, argument, value class) requirements, %d excepted, %d without a case\n", nops,
                  required, excepted, missing);
    free(table);
    kv_case_list_free(&cases);
    assert_int_equal(missing, 0);
}

/* Every exception names an op, argument and class that exist and are
 * required, so a stale exception cannot hide a new requirement. */
static void test_every_exception_is_live(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    for (int i = 0; i < COUNT(exceptions); i++) {
        const kv_op *op = kv_op_find(exceptions[i].op);
        if (op == NULL) fail_msg("exception %d: no op %s", i, exceptions[i].op);
        const kv_schema *s = kv_op_schema(op);
        const int ai = kv_schema_arg_index(s, exceptions[i].arg);
        if (ai < 0) fail_msg("exception %d: %s has no argument '%s'", i, exceptions[i].op, exceptions[i].arg);
        need_list l;
        needs_of(s, ai, &l);
        bool found = false;
        for (int k = 0; k < l.n; k++) found |= strcmp(l.label[k], exceptions[i].cls) == 0;
        if (!found)
            fail_msg("exception %d: %s '%s' does not need the class '%s'", i, exceptions[i].op, exceptions[i].arg,
                     exceptions[i].cls);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_argument_value_class_has_a_case),
        cmocka_unit_test(test_every_exception_is_live),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
