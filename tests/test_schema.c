/* The schema parser, canonical formatter and classifiers. Run from the
 * repository root (kernels/ops.schema is read at test time). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/schema.h"

#define OPS_SCHEMA "kernels/ops.schema"
#define MAX_LINES 256

typedef struct schema_lines {
    char text[MAX_LINES][512];
    int n;
} schema_lines;

static schema_lines *read_ops_schema(void) {
    schema_lines *l = calloc(1, sizeof *l);
    assert_non_null(l);
    FILE *f = fopen(OPS_SCHEMA, "r");
    if (f == NULL) fail_msg("cannot open %s (run the tests from the repository root)", OPS_SCHEMA);
    char buf[512];
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\r\n")] = '\0';
        if (buf[0] == '\0' || buf[0] == '#') continue;
        assert_true(l->n < MAX_LINES);
        strcpy(l->text[l->n++], buf);
    }
    fclose(f);
    return l;
}

static bool double_same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static void assert_value_equal(const kv_ivalue *a, const kv_ivalue *b) {
    assert_int_equal(a->tag, b->tag);
    switch (a->tag) {
    case KV_IV_NONE: break;
    case KV_IV_INT: assert_int_equal(a->v.i, b->v.i); break;
    case KV_IV_DOUBLE: assert_true(double_same(a->v.d, b->v.d)); break;
    case KV_IV_BOOL: assert_int_equal(a->v.b, b->v.b); break;
    case KV_IV_STR: assert_string_equal(a->v.str, b->v.str); break;
    case KV_IV_INT_LIST:
        assert_int_equal(a->v.ints.n, b->v.ints.n);
        for (int i = 0; i < a->v.ints.n; i++) assert_int_equal(a->v.ints.items[i], b->v.ints.items[i]);
        break;
    case KV_IV_SCALAR:
        assert_int_equal(a->v.scalar.kind, b->v.scalar.kind);
        if (a->v.scalar.kind == KV_SCALAR_INT) assert_int_equal(a->v.scalar.v.i, b->v.scalar.v.i);
        else if (a->v.scalar.kind == KV_SCALAR_BOOL) assert_int_equal(a->v.scalar.v.b, b->v.scalar.v.b);
        else assert_true(double_same(a->v.scalar.v.d, b->v.scalar.v.d));
        break;
    case KV_IV_TENSOR:
    case KV_IV_TENSOR_LIST:
    case KV_IV_DTYPE:
    case KV_IV_DEVICE:
    case KV_IV_GENERATOR:
        fail_msg("unexpected default tag %d", a->tag);
    }
}

static void assert_arg_equal(const kv_arg *a, const kv_arg *b) {
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->type.kind, b->type.kind);
    assert_int_equal(a->type.is_list, b->type.is_list);
    assert_int_equal(a->type.fixed_len, b->type.fixed_len);
    assert_int_equal(a->type.optional, b->type.optional);
    assert_int_equal(a->alias.set, b->alias.set);
    assert_int_equal(a->alias.is_write, b->alias.is_write);
    assert_int_equal(a->kwarg_only, b->kwarg_only);
    assert_int_equal(a->has_default, b->has_default);
    if (a->has_default) assert_value_equal(&a->default_value, &b->default_value);
}

static void assert_schema_equal(const kv_schema *a, const kv_schema *b) {
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->overload, b->overload);
    assert_string_equal(a->full_name, b->full_name);
    assert_int_equal(a->nargs, b->nargs);
    for (int i = 0; i < a->nargs; i++) assert_arg_equal(&a->args[i], &b->args[i]);
    assert_int_equal(a->nreturns, b->nreturns);
    for (int i = 0; i < a->nreturns; i++) assert_arg_equal(&a->returns[i], &b->returns[i]);
}

static void parse_ok(const char *text, kv_schema *s) {
    kv_status st = kv_schema_parse(text, s);
    if (st != KV_OK) fail_msg("'%s' failed to parse: %s", text, kv_last_error_message());
}

/* The parser does not keep the SymInt spelling, so canonical text says int. */
static void symint_to_int(const char *in, char *out) {
    while (*in) {
        if (strncmp(in, "SymInt", 6) == 0) {
            memcpy(out, "int", 3);
            out += 3;
            in += 6;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

static void test_ops_schema_parses_and_round_trips(void **state) {
    (void)state;
    schema_lines *l = read_ops_schema();
    assert_true(l->n >= 60);
    static kv_schema a, b;
    for (int i = 0; i < l->n; i++) {
        parse_ok(l->text[i], &a);
        char text[1024], expected[512];
        int len = kv_schema_format(&a, text, sizeof text);
        assert_int_equal(len, (int)strlen(text));
        symint_to_int(l->text[i], expected);
        /* ops.schema is written in canonical form already. */
        assert_string_equal(text, expected);
        parse_ok(text, &b);
        assert_schema_equal(&a, &b);
    }
    free(l);
}

static int count_ops(const char *const *names, int n, bool (*pred)(const kv_schema *)) {
    schema_lines *l = read_ops_schema();
    static kv_schema s;
    int hits = 0;
    for (int i = 0; i < l->n; i++) {
        parse_ok(l->text[i], &s);
        bool listed = false;
        for (int j = 0; j < n; j++)
            if (strcmp(names[j], s.full_name) == 0) listed = true;
        if (pred(&s) != listed) fail_msg("%s: classification %d, expected %d", s.full_name, pred(&s), listed);
        hits += listed;
    }
    free(l);
    return hits;
}

static void test_classification_of_ops_schema(void **state) {
    (void)state;
    static const char *const factories[] = { "empty.memory_format", "zeros", "ones", "full", "arange",
                                             "_efficientzerotensor" };
    static const char *const inplace[] = { "fill_.Scalar", "zero_", "copy_", "add_.Tensor", "mul_.Tensor",
                                           "clamp_.Tensor", "masked_fill_.Scalar" };
    static const char *const views[] = { "contiguous", "view", "reshape", "transpose.int", "t", "permute",
                                         "select.int", "slice.Tensor", "squeeze", "squeeze.dim", "unsqueeze",
                                         "expand", "as_strided", "detach", "unfold", "conj", "_conj",
                                         "resolve_conj", "_neg_view", "resolve_neg" };
    assert_int_equal(count_ops(factories, 6, kv_schema_is_factory), 6);
    assert_int_equal(count_ops(inplace, 7, kv_schema_is_inplace), 7);
    assert_int_equal(count_ops(views, 20, kv_schema_is_view), 20);
    static const char *const outs[] = { "add.out", "mul.out", "mm.out", "cat.out", "sum.IntList_out", "clamp.out" };
    assert_int_equal(count_ops(outs, 6, kv_schema_is_out), 6);
}

static void test_add_tensor(void **state) {
    (void)state;
    static kv_schema s;
    parse_ok("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", &s);
    assert_string_equal(s.name, "add");
    assert_string_equal(s.overload, "Tensor");
    assert_string_equal(s.full_name, "add.Tensor");
    assert_int_equal(s.nargs, 3);
    assert_string_equal(s.args[0].name, "self");
    assert_int_equal(s.args[0].type.kind, KV_TYPE_TENSOR);
    assert_false(s.args[0].type.optional);
    assert_false(s.args[0].kwarg_only);
    assert_false(s.args[1].kwarg_only);
    assert_false(s.args[1].has_default);
    assert_string_equal(s.args[2].name, "alpha");
    assert_int_equal(s.args[2].type.kind, KV_TYPE_SCALAR);
    assert_true(s.args[2].kwarg_only);
    assert_true(s.args[2].has_default);
    assert_int_equal(s.args[2].default_value.tag, KV_IV_SCALAR);
    assert_int_equal(s.args[2].default_value.v.scalar.kind, KV_SCALAR_INT);
    assert_int_equal(s.args[2].default_value.v.scalar.v.i, 1);
    assert_int_equal(s.nreturns, 1);
    assert_int_equal(s.returns[0].type.kind, KV_TYPE_TENSOR);
    assert_string_equal(s.returns[0].name, "");
    assert_int_equal(s.returns[0].alias.set, 0);
    assert_int_equal(kv_schema_arg_index(&s, "other"), 1);
    assert_int_equal(kv_schema_arg_index(&s, "alpha"), 2);
    assert_int_equal(kv_schema_arg_index(&s, "beta"), -1);
    assert_false(kv_schema_is_factory(&s));
    assert_false(kv_schema_is_inplace(&s));
    assert_false(kv_schema_is_view(&s));
}

static void test_factory_defaults(void **state) {
    (void)state;
    static kv_schema s;
    parse_ok("empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? "
             "device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
             &s);
    assert_int_equal(s.nargs, 6);
    assert_int_equal(s.args[0].type.kind, KV_TYPE_INT);
    assert_true(s.args[0].type.is_list);
    assert_int_equal(s.args[0].type.fixed_len, 0);
    assert_false(s.args[0].kwarg_only);
    static const kv_type_kind kinds[] = { KV_TYPE_SCALAR_TYPE, KV_TYPE_LAYOUT, KV_TYPE_DEVICE, KV_TYPE_BOOL,
                                          KV_TYPE_MEMORY_FORMAT };
    for (int i = 1; i < 6; i++) {
        assert_int_equal(s.args[i].type.kind, kinds[i - 1]);
        assert_true(s.args[i].type.optional);
        assert_true(s.args[i].kwarg_only);
        assert_true(s.args[i].has_default);
        assert_int_equal(s.args[i].default_value.tag, KV_IV_NONE);
    }
    assert_true(kv_schema_is_factory(&s));
}

static void test_alias_and_enum_defaults(void **state) {
    (void)state;
    static kv_schema s;
    parse_ok("contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)", &s);
    assert_int_equal(s.args[0].alias.set, 'a');
    assert_false(s.args[0].alias.is_write);
    assert_int_equal(s.args[1].default_value.tag, KV_IV_INT);
    assert_int_equal(s.args[1].default_value.v.i, 0);
    assert_int_equal(s.returns[0].alias.set, 'a');
    assert_true(kv_schema_is_view(&s));
    assert_false(kv_schema_is_inplace(&s));

    parse_ok("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", &s);
    assert_int_equal(s.args[0].alias.set, 'a');
    assert_true(s.args[0].alias.is_write);
    assert_true(s.returns[0].alias.is_write);
    assert_true(kv_schema_is_inplace(&s));
    assert_false(kv_schema_is_view(&s));
    assert_false(kv_schema_is_out(&s));

    /* Write alias on self but no trailing underscore: not in-place. */
    parse_ok("my_fill(Tensor(a!) self) -> Tensor(a!)", &s);
    assert_false(kv_schema_is_inplace(&s));
    /* Underscore, but the return aliases a different set. */
    parse_ok("my_fill_(Tensor(a!) self, Tensor(b!) other) -> Tensor(b!)", &s);
    assert_false(kv_schema_is_inplace(&s));

    parse_ok("x(Tensor self, *, MemoryFormat a=preserve_format, MemoryFormat b=channels_last, "
             "MemoryFormat c=channels_last_3d, Layout d=strided) -> Tensor",
             &s);
    assert_int_equal(s.args[1].default_value.v.i, 1);
    assert_int_equal(s.args[2].default_value.v.i, 2);
    assert_int_equal(s.args[3].default_value.v.i, 3);
    assert_int_equal(s.args[4].default_value.tag, KV_IV_INT);
    assert_int_equal(s.args[4].default_value.v.i, 0);
}

static void test_lists_and_numbers(void **state) {
    (void)state;
    static kv_schema s, t;
    parse_ok("pool(int[2] stride=1, int[1] dim=[], int[] d=[0, -1, 7], int[1]? odim, float eps=1e-5, "
             "float x=-2.5, float y=-inf, float z=inf, float w=3, Scalar s=2.5, Scalar u=-4, Scalar v=True, "
             "str a=\"it's\", str b='none', bool? c=None, SymInt p=-1) -> ()",
             &s);
    assert_int_equal(s.nargs, 16);
    assert_int_equal(s.nreturns, 0);
    const kv_ivalue *v = &s.args[0].default_value;
    assert_int_equal(s.args[0].type.fixed_len, 2);
    assert_int_equal(v->tag, KV_IV_INT_LIST);
    assert_int_equal(v->v.ints.n, 2);
    assert_ptr_equal(v->v.ints.items, s.args[0].default_ints);
    assert_int_equal(v->v.ints.items[0], 1);
    assert_int_equal(v->v.ints.items[1], 1);
    assert_int_equal(s.args[1].default_value.v.ints.n, 0);
    v = &s.args[2].default_value;
    assert_int_equal(v->v.ints.n, 3);
    assert_int_equal(v->v.ints.items[0], 0);
    assert_int_equal(v->v.ints.items[1], -1);
    assert_int_equal(v->v.ints.items[2], 7);
    assert_true(s.args[3].type.optional);
    assert_true(s.args[3].type.is_list);
    assert_int_equal(s.args[3].type.fixed_len, 1);
    assert_false(s.args[3].has_default);
    assert_int_equal(s.args[4].default_value.tag, KV_IV_DOUBLE);
    assert_true(s.args[4].default_value.v.d == 1e-5);
    assert_true(s.args[5].default_value.v.d == -2.5);
    assert_true(isinf(s.args[6].default_value.v.d) && s.args[6].default_value.v.d < 0);
    assert_true(isinf(s.args[7].default_value.v.d) && s.args[7].default_value.v.d > 0);
    assert_int_equal(s.args[8].default_value.tag, KV_IV_DOUBLE);
    assert_true(s.args[8].default_value.v.d == 3.0);
    assert_int_equal(s.args[9].default_value.v.scalar.kind, KV_SCALAR_DOUBLE);
    assert_true(s.args[9].default_value.v.scalar.v.d == 2.5);
    assert_int_equal(s.args[10].default_value.v.scalar.kind, KV_SCALAR_INT);
    assert_int_equal(s.args[10].default_value.v.scalar.v.i, -4);
    assert_int_equal(s.args[11].default_value.v.scalar.kind, KV_SCALAR_BOOL);
    assert_true(s.args[11].default_value.v.scalar.v.b);
    assert_int_equal(s.args[12].default_value.tag, KV_IV_STR);
    assert_string_equal(s.args[12].default_value.v.str, "it's");
    assert_ptr_equal(s.args[12].default_value.v.str, s.args[12].default_str);
    assert_string_equal(s.args[13].default_value.v.str, "none");
    assert_int_equal(s.args[14].default_value.tag, KV_IV_NONE);
    assert_int_equal(s.args[15].type.kind, KV_TYPE_INT);
    assert_int_equal(s.args[15].default_value.v.i, -1);
    assert_true(kv_schema_is_factory(&s));

    char text[1024];
    kv_schema_format(&s, text, sizeof text);
    assert_string_equal(text,
                        "pool(int[2] stride=[1, 1], int[1] dim=[], int[] d=[0, -1, 7], int[1]? odim, float eps=1e-05, "
                        "float x=-2.5, float y=-inf, float z=inf, float w=3.0, Scalar s=2.5, Scalar u=-4, "
                        "Scalar v=True, str a='it\\'s', str b='none', bool? c=None, int p=-1) -> ()");
    parse_ok(text, &t);
    assert_schema_equal(&s, &t);
}

static void test_returns(void **state) {
    (void)state;
    static kv_schema s;
    parse_ok("topk.values(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True, *, "
             "Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)",
             &s);
    assert_int_equal(s.nreturns, 2);
    assert_string_equal(s.returns[0].name, "values");
    assert_int_equal(s.returns[0].alias.set, 'a');
    assert_true(s.returns[0].alias.is_write);
    assert_string_equal(s.returns[1].name, "indices");
    assert_int_equal(s.returns[1].alias.set, 'b');
    assert_true(s.args[5].kwarg_only);
    assert_true(kv_schema_is_out(&s));
    assert_false(kv_schema_is_inplace(&s));
    assert_false(kv_schema_is_view(&s));

    parse_ok("native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
             "-> (Tensor, Tensor, Tensor)",
             &s);
    assert_int_equal(s.nreturns, 3);
    assert_true(s.args[2].type.optional);
    assert_false(s.args[4].has_default);

    static const struct {
        const char *text;
        kv_type_kind kind;
    } singles[] = {
        { "is_x(Tensor self) -> bool", KV_TYPE_BOOL },
        { "item(Tensor self) -> Scalar", KV_TYPE_SCALAR },
        { "size.int(Tensor self, int dim) -> int", KV_TYPE_INT },
        { "q(Tensor self) -> float", KV_TYPE_FLOAT },
    };
    for (size_t i = 0; i < sizeof singles / sizeof singles[0]; i++) {
        parse_ok(singles[i].text, &s);
        assert_int_equal(s.nreturns, 1);
        assert_int_equal(s.returns[0].type.kind, singles[i].kind);
    }
    parse_ok("unbind_like(Tensor(a) self) -> Tensor(a)[]", &s);
    assert_true(s.returns[0].type.is_list);
    assert_int_equal(s.returns[0].alias.set, 'a');
    parse_ok("cat(Tensor[] tensors, int dim=0) -> Tensor", &s);
    assert_true(s.args[0].type.is_list);
    assert_false(kv_schema_is_factory(&s));
    parse_ok("noargs() -> ()", &s);
    assert_int_equal(s.nargs, 0);
    assert_int_equal(s.nreturns, 0);
}

static void test_whitespace_tolerant(void **state) {
    (void)state;
    static kv_schema a, b;
    parse_ok("  add.Tensor (\tTensor  self ,Tensor other , * , Scalar alpha = 1 )->Tensor  \n", &a);
    parse_ok("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", &b);
    assert_schema_equal(&a, &b);
    parse_ok("f( Tensor ( a ! ) self, int [ 2 ] ? k ) -> ( Tensor ( a ! ) out , Tensor )", &a);
    assert_true(a.args[0].alias.is_write);
    assert_int_equal(a.args[1].type.fixed_len, 2);
    assert_true(a.args[1].type.optional);
    assert_string_equal(a.returns[0].name, "out");
    char text[256];
    kv_schema_format(&a, text, sizeof text);
    assert_string_equal(text, "f(Tensor(a!) self, int[2]? k) -> (Tensor(a!) out, Tensor)");
}

static void test_format_truncates(void **state) {
    (void)state;
    static kv_schema s;
    parse_ok("neg(Tensor self) -> Tensor", &s);
    char small[10];
    assert_int_equal(kv_schema_format(&s, small, sizeof small), 26);
    assert_string_equal(small, "neg(Tenso");
    assert_int_equal(kv_schema_format(&s, NULL, 0), 26);
}

/* Each malformed schema fails with KV_ERR_SCHEMA at a hand-counted column. */
static void test_malformed(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int col;
        const char *what; /* part of the message after "expected " */
    } bad[] = {
        { "(Tensor self) -> Tensor", 1, "an op name" },                           /* missing name */
        { "add.(Tensor self) -> Tensor", 5, "an overload name" },                 /* missing overload */
        { "neg Tensor self) -> Tensor", 5, "'('" },                               /* missing '(' */
        { "neg(Tenser self) -> Tensor", 5, "a type, got 'Tenser'" },              /* bad type */
        { "neg(Tensor self -> Tensor", 17, "',' or ')'" },                        /* missing ')' */
        { "f(Tensor x, int x) -> Tensor", 17, "a unique argument name" },         /* duplicate */
        { "f(int x=1.5) -> Tensor", 9, "a default that fits type int" },          /* bad default */
        { "f(bool b=1) -> Tensor", 10, "a default that fits type bool" },         /* bad default */
        { "f(int x=None) -> Tensor", 9, "None needs an optional type" },          /* None on non-optional */
        { "f(Tensor x=0) -> Tensor", 12, "None as the default of a Tensor" },     /* Tensor default */
        { "f(str s=none) -> Tensor", 9, "a quoted string" },                      /* bare string */
        { "f(*, int x, *, int y) -> ()", 13, "at most one '*'" },                 /* second '*' */
        { "f(int x, *) -> ()", 11, "an argument after '*'" },                     /* dangling '*' */
        { "f(Tensor(1) x) -> Tensor", 10, "an alias set letter" },                /* unknown annotation */
        { "f(Tensor(ab) x) -> Tensor", 11, "'!' or ')' in the alias annotation" }, /* unknown annotation */
        { "f(Tensor(a -> *) x) -> Tensor(a)", 12, "wildcard" },                  /* rejected wildcard */
        { "f(int(a) x) -> Tensor", 6, "alias annotations apply to Tensor only" },
        { "f(Tensor?[] x) -> Tensor", 10, "Tensor?[] are not supported" },
        { "f(float[] x) -> Tensor", 8, "lists are supported for int" },
        { "f(int[2] x=[1, 2, 3]) -> Tensor", 12, "a default list of 2 ints" },
        { "f(int x) -> Tensor extra", 20, "end of schema" },                      /* trailing garbage */
        { "f(int x) Tensor", 10, "'->'" },
        { "f(int x) -> (Tensor, Tensor", 28, "',' or ')' in the returns" },
        { "f(Layout l=sparse) -> Tensor", 12, "a default that fits type Layout" },
        { "f(int x=99999999999999999999) -> ()", 9, "an integer in int64 range" },
        { "f(str s='abc) -> ()", 9, "a closing '" },
        { "f(Tensor self,) -> Tensor", 15, "a type" },
        { "f(Tensor) -> Tensor", 9, "an argument name" },
        { "f(int[0] x) -> ()", 7, "a list length of at least 1" },
        /* 17 arguments of 7 characters each from column 3: the 17th starts at 3 + 16 * 7. */
        { "f(int a, int b, int c, int d, int e, int f, int g, int h, int i, int j, int k, int l, int m, int n, "
          "int o, int p, int q) -> ()",
          115, "at most 16 arguments" },
        { "f() -> (int a, int b, int c, int d, int e)", 37, "at most 4 returns" },
    };
    static kv_schema s;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kv_error_clear();
        kv_status st = kv_schema_parse(bad[i].text, &s);
        if (st != KV_ERR_SCHEMA) fail_msg("'%s' parsed (status %d), expected a schema error", bad[i].text, st);
        assert_int_equal(kv_last_error(), KV_ERR_SCHEMA);
        const char *msg = kv_last_error_message();
        char want[64];
        snprintf(want, sizeof want, ": col %d: expected ", bad[i].col);
        if (strstr(msg, want) == NULL) fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, msg, want);
        if (strstr(msg, bad[i].what) == NULL) fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, msg, bad[i].what);
        if (strncmp(msg, "schema '", 8) != 0) fail_msg("'%s': message '%s' does not quote the schema", bad[i].text, msg);
    }
    assert_int_equal(kv_schema_parse(NULL, &s), KV_ERR_SCHEMA);
}

static void test_type_kind_names(void **state) {
    (void)state;
    static const char *const names[] = { "Tensor", "int",        "float",  "bool",   "str",
                                         "Scalar", "ScalarType", "Device", "Layout", "MemoryFormat" };
    for (int k = KV_TYPE_TENSOR; k <= KV_TYPE_MEMORY_FORMAT; k++)
        assert_string_equal(kv_type_kind_name((kv_type_kind)k), names[k]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_schema_parses_and_round_trips),
        cmocka_unit_test(test_classification_of_ops_schema),
        cmocka_unit_test(test_add_tensor),
        cmocka_unit_test(test_factory_defaults),
        cmocka_unit_test(test_alias_and_enum_defaults),
        cmocka_unit_test(test_lists_and_numbers),
        cmocka_unit_test(test_returns),
        cmocka_unit_test(test_whitespace_tolerant),
        cmocka_unit_test(test_format_truncates),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_type_kind_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
