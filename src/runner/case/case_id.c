/* The canonical texts of a case, made from the option table's format
 * callbacks (case_values.c): the case ID, the golden key and the repro
 * line.
 *
 * ID:      op(dtype=f32,shape=[64,33]:[33],layout=t,args=dim=1;keepdim=1,
 *             fill=exact,seed=7,device=accel)
 * keys in table order, each left out at its default (layout all c, fill
 * real, seed 0, device cpu, no args differing from the schema defaults);
 * dtype and shape always present when the op has tensor inputs. Per-input
 * values are joined with ':' and collapse to one value when that one value
 * means the same inputs when read back. Inside args `;` separates
 * arguments, because `,` separates the ID's keys; the grammar accepts
 * both. check (joined with `+`), tol and expect are in the ID when not
 * the default, since they change the verdict; the golden key leaves them
 * out, since they do not change the values. The ID contains no blanks, so
 * it is one token in reports. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/dispatch.h"
#include "runner/case/case.h"
#include "runner/case/case_options.h"
#include "runner/case/spec.h"

/* ---- IDs, golden keys, repro lines ---- */

static const kv_schema *kv_case_schema(const kv_case *c) {
    const kv_op *op = kv_op_find(c->op);
    if (op == NULL) {
        kv_error_clear(); /* formatting never fails; it just cannot collapse shapes */
        return NULL;
    }
    return kv_op_schema(op);
}

static int kv_case_key_text(const kv_case *c, unsigned want, char *buf, int cap) {
    const kv_schema *s = kv_case_schema(c);
    char value[KV_CASE_ID_MAX];
    int n = 0;
    if (cap > 0) buf[0] = '\0';
    kv_case_put(buf, cap, &n, "%s(", c->op);
    bool first = true;
    for (int r = 0; r < kv_case_option_count; r++) {
        const kv_option_row *row = &kv_case_options[r];
        if (!(row->text & want) || row->format == NULL) continue;
        if (row->format(c, s, KV_TEXT_ID, value, sizeof value) <= 0) continue;
        kv_case_put(buf, cap, &n, "%s%s=%s", first ? "" : ",", row->name, value);
        first = false;
    }
    kv_case_put(buf, cap, &n, ")");
    return n;
}

int kv_case_id(const kv_case *c, char *buf, int cap) { return kv_case_key_text(c, KV_TEXT_IN_ID, buf, cap); }

int kv_case_golden_key(const kv_case *c, char *buf, int cap) {
    return kv_case_key_text(c, KV_TEXT_IN_GOLDEN, buf, cap);
}

/* Characters a POSIX shell takes literally anywhere in a word. */
static bool kv_shell_safe(const char *s) {
    for (; *s; s++) {
        const char ch = *s;
        const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                        strchr("._,:=+-/@%", ch) != NULL;
        if (!ok) return false;
    }
    return true;
}

static void kv_put_word(char *buf, int cap, int *n, const char *word) {
    /* Values never contain a single quote (the grammar has no way to write one). */
    if (kv_shell_safe(word)) {
        kv_case_put(buf, cap, n, " %s", word);
    } else {
        kv_case_put(buf, cap, n, " '%s'", word);
    }
}

int kv_case_repro(const kv_case *c, char *buf, int cap) {
    const kv_schema *s = kv_case_schema(c);
    char value[KV_CASE_ID_MAX], word[KV_CASE_ID_MAX + 32];
    int n = 0;
    if (cap > 0) buf[0] = '\0';
    kv_case_put(buf, cap, &n, "%s", kv_case_repro_prefix());
    /* A program case's op ("program:NAME") is not an op: its --program=
     * row below says what to run. */
    if (c->program[0] == '\0') {
        snprintf(word, sizeof word, "--op=%s", c->op);
        kv_put_word(buf, cap, &n, word);
    }
    for (int r = 0; r < kv_case_option_count; r++) {
        const kv_option_row *row = &kv_case_options[r];
        if (!(row->text & KV_TEXT_IN_REPRO) || row->format == NULL) continue;
        if (row->format(c, s, KV_TEXT_REPRO, value, sizeof value) <= 0) continue;
        snprintf(word, sizeof word, "--%s=%s", row->name, value);
        kv_put_word(buf, cap, &n, word);
    }
    return n;
}
