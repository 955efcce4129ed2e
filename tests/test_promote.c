/* Type promotion against PyTorch's documented rules.
 *
 * Expected values come from torch.promote_types's table and the type
 * promotion doc (tensor_attributes.html#type-promotion-doc); the one place
 * kvsuite must differ is complex32, which it does not have (c64 instead). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kv/tensor.h"

/* ---- promote_types ---- */

typedef struct promote_row {
    kv_dtype a, b, want;
} promote_row;

static const promote_row promote_rows[] = {
    { KV_BOOL, KV_BOOL, KV_BOOL },
    { KV_BOOL, KV_U8, KV_U8 },
    { KV_BOOL, KV_I8, KV_I8 },
    { KV_BOOL, KV_F16, KV_F16 },
    { KV_BOOL, KV_BF16, KV_BF16 },
    { KV_BOOL, KV_C128, KV_C128 },
    { KV_U8, KV_U8, KV_U8 },
    { KV_U8, KV_I8, KV_I16 },   /* neither holds the other: the next signed type */
    { KV_I8, KV_U8, KV_I16 },   /* same, other order */
    { KV_U8, KV_I16, KV_I16 },  /* i16 holds every u8 */
    { KV_U8, KV_I32, KV_I32 },
    { KV_U8, KV_I64, KV_I64 },
    { KV_I8, KV_I16, KV_I16 },
    { KV_I16, KV_I32, KV_I32 },
    { KV_I32, KV_I64, KV_I64 },
    { KV_I64, KV_F16, KV_F16 },  /* any integer + f16 is f16, even i64 */
    { KV_U8, KV_F16, KV_F16 },
    { KV_I64, KV_BF16, KV_BF16 }, /* likewise bf16 */
    { KV_I8, KV_BF16, KV_BF16 },
    { KV_F16, KV_BF16, KV_F32 },  /* neither half type holds the other */
    { KV_BF16, KV_F16, KV_F32 },
    { KV_F16, KV_F32, KV_F32 },
    { KV_BF16, KV_F32, KV_F32 },
    { KV_BF16, KV_F64, KV_F64 },
    { KV_F32, KV_F64, KV_F64 },
    { KV_I32, KV_F32, KV_F32 },
    { KV_I64, KV_F32, KV_F32 },   /* size is not considered across categories */
    { KV_I64, KV_F64, KV_F64 },
    { KV_F16, KV_C64, KV_C64 },
    { KV_BF16, KV_C64, KV_C64 },
    { KV_F32, KV_C64, KV_C64 },
    { KV_F64, KV_C64, KV_C128 },  /* c64 cannot hold f64's precision */
    { KV_C64, KV_F64, KV_C128 },
    { KV_C64, KV_C128, KV_C128 },
    { KV_I64, KV_C64, KV_C64 },
    { KV_F16, KV_C128, KV_C128 },
    { KV_C128, KV_C128, KV_C128 },
};

static void test_promote_types_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof promote_rows / sizeof promote_rows[0]; i++) {
        const promote_row *r = &promote_rows[i];
        const kv_dtype got = kv_promote_types(r->a, r->b);
        if (got != r->want) {
            fail_msg("promote_types(%s, %s) = %s, want %s", kv_dtype_name(r->a), kv_dtype_name(r->b),
                     kv_dtype_name(got), kv_dtype_name(r->want));
        }
    }
}

/* Properties of the lattice that hold for every pair. */
static void test_promote_types_properties(void **state) {
    (void)state;
    for (int a = 0; a < KV_DTYPE_COUNT; a++) {
        assert_int_equal(kv_promote_types((kv_dtype)a, (kv_dtype)a), a);     /* idempotent */
        assert_int_equal(kv_promote_types(KV_BOOL, (kv_dtype)a), a);         /* bool is the bottom */
        assert_int_equal(kv_promote_types((kv_dtype)a, KV_C128), KV_C128);   /* c128 is the top */
        for (int b = 0; b < KV_DTYPE_COUNT; b++) {
            const kv_dtype ab = kv_promote_types((kv_dtype)a, (kv_dtype)b);
            assert_int_equal(ab, kv_promote_types((kv_dtype)b, (kv_dtype)a)); /* symmetric */
            /* Never a lower category than either input; both cast into it. */
            assert_true(kv_dtype_category_of(ab) >= kv_dtype_category_of((kv_dtype)a));
            assert_true(kv_dtype_category_of(ab) >= kv_dtype_category_of((kv_dtype)b));
            assert_true(kv_can_cast((kv_dtype)a, ab));
            for (int c = 0; c < KV_DTYPE_COUNT; c++) { /* associative */
                assert_int_equal(kv_promote_types(ab, (kv_dtype)c),
                                 kv_promote_types((kv_dtype)a, kv_promote_types((kv_dtype)b, (kv_dtype)c)));
            }
        }
    }
}

/* ---- result_type ---- */

/* Operand spec: dimensioned tensor, 0-dim tensor, scalar, or absent. */
typedef enum op_kind { END, DIM, ZERO, SCALAR, ABSENT } op_kind;

typedef struct operand {
    op_kind kind;
    kv_dtype dt;  /* tensors */
    kv_scalar s;  /* scalars */
} operand;

#define T(d) { DIM, d, { 0 } }
#define Z(d) { ZERO, d, { 0 } }
#define SF { SCALAR, KV_F64, { .kind = KV_SCALAR_DOUBLE, .v.d = 2.5 } }
#define SI { SCALAR, KV_I64, { .kind = KV_SCALAR_INT, .v.i = 1 } }
#define SBIG { SCALAR, KV_I64, { .kind = KV_SCALAR_INT, .v.i = 1000 } }
#define SB { SCALAR, KV_BOOL, { .kind = KV_SCALAR_BOOL, .v.b = true } }
#define SC { SCALAR, KV_C128, { .kind = KV_SCALAR_COMPLEX, .v.c = { 0.0, 1.0 } } }
#define NUL { ABSENT, KV_F32, { 0 } }

typedef struct result_row {
    operand ops[4];
    kv_dtype want;
} result_row;

static const result_row result_rows[] = {
    /* Scalars of a higher category give the default dtype of that category. */
    { { T(KV_I32), SF }, KV_F32 },
    { { T(KV_BOOL), SF }, KV_F32 },
    { { T(KV_I64), SF }, KV_F32 },
    /* A float scalar never widens a float tensor. */
    { { T(KV_F16), SF }, KV_F16 },
    { { T(KV_BF16), SF }, KV_BF16 },
    { { T(KV_F64), SF }, KV_F64 },
    /* Same-category int scalars never widen, whatever their value. */
    { { T(KV_I32), SI }, KV_I32 },
    { { T(KV_U8), SBIG }, KV_U8 },
    { { T(KV_I8), SI }, KV_I8 },
    /* bool is its own category: an int scalar lifts a bool tensor to i64. */
    { { T(KV_BOOL), SI }, KV_I64 },
    { { T(KV_BOOL), SB }, KV_BOOL },
    { { T(KV_I16), SB }, KV_I16 },
    /* Complex scalars: c64 by default, c128 when the tensor is f64. */
    { { T(KV_F64), SC }, KV_C128 },
    { { T(KV_F32), SC }, KV_C64 },
    { { T(KV_I32), SC }, KV_C64 },
    { { T(KV_F16), SC }, KV_C64 },   /* PyTorch: complex32, which kvsuite lacks */
    { { T(KV_C128), SC }, KV_C128 },
    /* 0-dim tensors: a higher category contributes its own dtype... */
    { { T(KV_I64), Z(KV_F64) }, KV_F64 },
    { { T(KV_I32), Z(KV_F16) }, KV_F16 },
    { { T(KV_BOOL), Z(KV_U8) }, KV_U8 },
    { { T(KV_BOOL), Z(KV_F64) }, KV_F64 },
    { { T(KV_I64), Z(KV_C128) }, KV_C128 },
    /* ...a float dimensioned tensor keeps its precision against complex... */
    { { T(KV_F64), Z(KV_C64) }, KV_C128 },
    { { T(KV_F32), Z(KV_C128) }, KV_C64 },
    /* ...and the same category changes nothing. */
    { { T(KV_U8), Z(KV_I64) }, KV_U8 },    /* the doc's example: uint8 */
    { { T(KV_F32), Z(KV_F64) }, KV_F32 },
    { { T(KV_BF16), Z(KV_F64) }, KV_BF16 },
    { { T(KV_I32), Z(KV_BOOL) }, KV_I32 },
    { { T(KV_C64), Z(KV_C128) }, KV_C64 },
    /* Within one group it is plain promote_types. */
    { { T(KV_I8), T(KV_U8) }, KV_I16 },
    { { T(KV_F16), T(KV_BF16) }, KV_F32 },
    { { Z(KV_I32), Z(KV_F64) }, KV_F64 },
    { { Z(KV_U8), Z(KV_I8) }, KV_I16 },
    /* 0-dim tensors outrank scalars the way dimensioned tensors do. */
    { { Z(KV_F64), SF }, KV_F64 },
    { { Z(KV_I32), SF }, KV_F32 },
    { { Z(KV_I32), SI }, KV_I32 },
    { { Z(KV_BOOL), SI }, KV_I64 },
    { { Z(KV_F64), SC }, KV_C128 },
    { { Z(KV_C64), SC }, KV_C64 },
    /* All three groups. */
    { { T(KV_I32), Z(KV_F64), SF }, KV_F64 }, /* 0-dim f64 beats the scalar, then lifts the int */
    { { T(KV_I32), Z(KV_I64), SF }, KV_F32 }, /* the float scalar decides: default f32 */
    { { T(KV_I32), Z(KV_F16), SC }, KV_C64 }, /* f16 0-dim with complex -> c64 */
    { { T(KV_F16), Z(KV_F64), SC }, KV_C64 },
    /* Only scalars. */
    { { SF, SI }, KV_F32 },
    { { SI, SB }, KV_I64 },
    { { SC, SF }, KV_C64 },
    /* Absent optional tensors are ignored. */
    { { NUL, T(KV_I16), SI }, KV_I16 },
    { { T(KV_U8), NUL, Z(KV_F64) }, KV_F64 },
};

static const char *kind_name(op_kind k) {
    switch (k) {
    case END: return "end";
    case DIM: return "T";
    case ZERO: return "Z";
    case SCALAR: return "S";
    case ABSENT: return "null";
    }
    return "?";
}

static void test_result_type_table(void **state) {
    (void)state;
    static const int64_t sizes1[1] = { 3 };
    for (size_t i = 0; i < sizeof result_rows / sizeof result_rows[0]; i++) {
        const result_row *r = &result_rows[i];
        kv_tensor *owned[4] = { 0 };
        const kv_tensor *tensors[4];
        kv_scalar scalars[4];
        int nt = 0, ns = 0;
        char desc[200] = "";
        for (int k = 0; k < 4 && r->ops[k].kind != END; k++) {
            const operand *o = &r->ops[k];
            char part[40];
            switch (o->kind) {
            case DIM:
            case ZERO:
                owned[k] = kv_tensor_empty(sizes1, o->kind == DIM ? 1 : 0, o->dt, KV_DEVICE_CPU0);
                assert_non_null(owned[k]);
                tensors[nt++] = owned[k];
                snprintf(part, sizeof part, "%s(%s) ", kind_name(o->kind), kv_dtype_name(o->dt));
                break;
            case ABSENT:
                tensors[nt++] = NULL;
                snprintf(part, sizeof part, "null ");
                break;
            case SCALAR:
                scalars[ns++] = o->s;
                snprintf(part, sizeof part, "S(kind %d) ", (int)o->s.kind);
                break;
            case END:
                part[0] = '\0';
                break;
            }
            strncat(desc, part, sizeof desc - strlen(desc) - 1);
        }
        const kv_dtype got = kv_result_type(tensors, nt, scalars, ns);
        for (int k = 0; k < 4; k++) kv_tensor_release(owned[k]);
        if (got != r->want) {
            fail_msg("row %zu: result_type(%s) = %s, want %s", i, desc, kv_dtype_name(got), kv_dtype_name(r->want));
        }
    }
    assert_true(sizeof result_rows / sizeof result_rows[0] + sizeof promote_rows / sizeof promote_rows[0] >= 40);
}

/* Order of operands never matters. */
static void test_result_type_order(void **state) {
    (void)state;
    static const int64_t sizes1[1] = { 2 };
    kv_tensor *a = kv_tensor_empty(sizes1, 1, KV_I32, KV_DEVICE_CPU0);
    kv_tensor *b = kv_tensor_empty(sizes1, 0, KV_F64, KV_DEVICE_CPU0);
    kv_tensor *c = kv_tensor_empty(sizes1, 1, KV_U8, KV_DEVICE_CPU0);
    const kv_tensor *abc[3] = { a, b, c }, *cba[3] = { c, b, a }, *bac[3] = { b, a, c };
    assert_int_equal(kv_result_type(abc, 3, NULL, 0), KV_F64);
    assert_int_equal(kv_result_type(cba, 3, NULL, 0), KV_F64);
    assert_int_equal(kv_result_type(bac, 3, NULL, 0), KV_F64);
    kv_tensor_release(a);
    kv_tensor_release(b);
    kv_tensor_release(c);
}

/* ---- can_cast ---- */

static void test_can_cast(void **state) {
    (void)state;
    static const struct { kv_dtype from, to; bool want; } rows[] = {
        { KV_F32, KV_I32, false },  /* float -> int: no */
        { KV_I32, KV_F32, true },
        { KV_C64, KV_F64, false },  /* complex -> real: no, even to a wider real */
        { KV_F64, KV_C64, true },   /* narrower but same-or-higher category: yes */
        { KV_I64, KV_BOOL, false }, /* only bool goes into bool */
        { KV_F32, KV_BOOL, false },
        { KV_C128, KV_BOOL, false },
        { KV_BOOL, KV_BOOL, true },
        { KV_BOOL, KV_I8, true },
        { KV_BOOL, KV_C64, true },
        { KV_F16, KV_BF16, true },
        { KV_U8, KV_I8, true },     /* same category, sign and size ignored */
        { KV_I64, KV_U8, true },
        { KV_C128, KV_C64, true },
        { KV_F64, KV_I64, false },
        { KV_C64, KV_I64, false },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (kv_can_cast(rows[i].from, rows[i].to) != rows[i].want) {
            fail_msg("can_cast(%s, %s) != %d", kv_dtype_name(rows[i].from), kv_dtype_name(rows[i].to), rows[i].want);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_promote_types_table),
        cmocka_unit_test(test_promote_types_properties),
        cmocka_unit_test(test_result_type_table),
        cmocka_unit_test(test_result_type_order),
        cmocka_unit_test(test_can_cast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
