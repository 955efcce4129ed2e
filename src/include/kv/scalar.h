/* Scalars: the values of `Scalar` arguments (alpha, fill values, bounds). */
#ifndef KV_SCALAR_H
#define KV_SCALAR_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dtype.h"

typedef enum kv_scalar_kind {
    KV_SCALAR_BOOL,
    KV_SCALAR_INT,
    KV_SCALAR_DOUBLE,
    KV_SCALAR_COMPLEX
} kv_scalar_kind;

typedef struct kv_scalar {
    kv_scalar_kind kind;
    union {
        bool b;
        int64_t i;
        double d;
        struct { double re, im; } c;
    } v;
} kv_scalar;

static inline kv_scalar kv_scalar_bool(bool b) { return (kv_scalar){ .kind = KV_SCALAR_BOOL, .v.b = b }; }
static inline kv_scalar kv_scalar_int(int64_t i) { return (kv_scalar){ .kind = KV_SCALAR_INT, .v.i = i }; }
static inline kv_scalar kv_scalar_double(double d) { return (kv_scalar){ .kind = KV_SCALAR_DOUBLE, .v.d = d }; }
static inline kv_scalar kv_scalar_complex(double re, double im) {
    return (kv_scalar){ .kind = KV_SCALAR_COMPLEX, .v.c = { re, im } };
}

/* Conversions follow C semantics for the value (int -> double exact when
 * representable, double -> int truncates); complex -> real takes re. */
double kv_scalar_to_double(kv_scalar s);
int64_t kv_scalar_to_int(kv_scalar s);
bool kv_scalar_to_bool(kv_scalar s);
void kv_scalar_to_complex(kv_scalar s, double *re, double *im);

/* The dtype PyTorch gives a Python scalar of this kind when it takes part
 * in promotion: bool, i64, f64 (the "default" float is decided by the
 * promotion code), c128. */
kv_dtype kv_scalar_dtype(kv_scalar s);
kv_dtype_category kv_scalar_category(kv_scalar s);

/* Parses "1", "-2.5", "true", "false", "1+2j", "nan", "inf", "-inf".
 * Returns 0 on success, -1 on malformed input. */
int kv_scalar_parse(const char *text, kv_scalar *out);
/* Writes a canonical text form that kv_scalar_parse reads back exactly. */
int kv_scalar_format(kv_scalar s, char *buf, int cap);

#endif
