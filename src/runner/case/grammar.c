/* Lexing case lines and files into specs; defaults, --reset and --batch.
 * Which options exist and how their values split is the option table's
 * business (runner/spec.h); this file only knows `op` (what makes a line a
 * case line) and the two structural keys, reset and batch. */
/* realpath(3), for include-cycle detection, is an XSI extension. */
#define _XOPEN_SOURCE 700

#include "runner/case/grammar.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- tokens ---- */

typedef struct kv_tok {
    char *text;
    int *cols;
    int len, cap;
    int line;
    int col;        /* where the token starts (its opening quote, if any) */
} kv_tok;

typedef struct kv_toks {
    kv_tok *items;
    int n, cap;
} kv_toks;

static void kv_toks_clear(kv_toks *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->items[i].text);
        free(t->items[i].cols);
    }
    t->n = 0;
}

static void kv_toks_free(kv_toks *t) {
    kv_toks_clear(t);
    free(t->items);
    t->items = NULL;
    t->cap = 0;
}

static kv_status kv_oom(void) { return kv_error(KV_ERR_OOM, "case grammar: out of memory"); }

static kv_status kv_toks_start(kv_toks *t, int line, int col) {
    if (t->n == t->cap) {
        const int cap = t->cap ? t->cap * 2 : 16;
        kv_tok *items = realloc(t->items, (size_t)cap * sizeof *items);
        if (items == NULL) return kv_oom();
        t->items = items;
        t->cap = cap;
    }
    kv_tok *k = &t->items[t->n++];
    memset(k, 0, sizeof *k);
    k->line = line;
    k->col = col;
    k->cap = 32;
    k->text = malloc((size_t)k->cap + 1);
    k->cols = malloc(((size_t)k->cap + 1) * sizeof *k->cols);
    if (k->text == NULL || k->cols == NULL) return kv_oom();
    k->text[0] = '\0';
    k->cols[0] = col;
    return KV_OK;
}

static kv_status kv_tok_append(kv_tok *k, char ch, int col) {
    if (k->len == k->cap) {
        const int cap = k->cap * 2;
        char *text = realloc(k->text, (size_t)cap + 1);
        if (text == NULL) return kv_oom();
        k->text = text;
        int *cols = realloc(k->cols, ((size_t)cap + 1) * sizeof *cols);
        if (cols == NULL) return kv_oom();
        k->cols = cols;
        k->cap = cap;
    }
    k->text[k->len] = ch;
    k->cols[k->len] = col;
    k->len++;
    k->text[k->len] = '\0';
    k->cols[k->len] = col + 1;
    return KV_OK;
}

/* ---- lexer ---- */

typedef struct kv_lexer {
    const char *p;
    const char *file;
    int line;       /* of the next physical line */
} kv_lexer;

static bool kv_is_blank(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* Reads one logical line (physical lines joined by trailing backslashes)
 * into toks. *got is false at the end of the text. */
static kv_status kv_lex_line(kv_lexer *lx, kv_toks *toks, int *first_line, bool *got) {
    kv_toks_clear(toks);
    *first_line = lx->line;
    *got = false;
    while (*lx->p != '\0') {
        *got = true;
        const char *p = lx->p;
        bool in_tok = false, in_quote = false, cont = false;
        int col = 1, quote_col = 0;
        kv_status st;
        while (*p != '\0' && *p != '\n') {
            const char ch = *p;
            if (!in_quote && ch == '#') {
                while (*p != '\0' && *p != '\n') p++;
                break;
            }
            if (ch == '\'') {
                if (!in_tok) {
                    if ((st = kv_toks_start(toks, lx->line, col)) != KV_OK) return st;
                    in_tok = true;
                }
                in_quote = !in_quote;
                quote_col = col;
                cont = false;
            } else if (!in_quote && kv_is_blank(ch)) {
                in_tok = false;
            } else {
                if (!in_tok) {
                    if ((st = kv_toks_start(toks, lx->line, col)) != KV_OK) return st;
                    in_tok = true;
                }
                if ((st = kv_tok_append(&toks->items[toks->n - 1], ch, col)) != KV_OK) return st;
                cont = !in_quote && ch == '\\';
            }
            p++;
            col++;
        }
        if (in_quote) {
            return kv_spec_error(KV_ERR_INVALID_ARG, lx->file, lx->line, quote_col,
                                 "unterminated quote (a quote must close on its line)");
        }
        lx->p = *p == '\n' ? p + 1 : p;
        lx->line++;
        if (!cont) break;
        /* Drop the backslash; a lone "\" was a token of its own. */
        kv_tok *last = &toks->items[toks->n - 1];
        last->text[--last->len] = '\0';
        if (last->len == 0) {
            free(last->text);
            free(last->cols);
            toks->n--;
        }
    }
    return KV_OK;
}

/* ---- one line's options ---- */

typedef struct kv_line {
    kv_spec_option *opts[KV_SPEC_MAX_OPTIONS];
    kv_spec_option *batches[KV_SPEC_MAX_OPTIONS];
    int nbatches;
    bool reset;
    int first_opt_col;   /* first table option, for "nothing to run" */
    int op_col;
} kv_line;

static void kv_line_free(kv_line *ln) {
    for (int i = 0; i < KV_SPEC_MAX_OPTIONS; i++) kv_spec_option_release(ln->opts[i]);
    for (int i = 0; i < ln->nbatches; i++) kv_spec_option_release(ln->batches[i]);
    memset(ln, 0, sizeof *ln);
}

static bool kv_is_name_char(char ch, bool first) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') return true;
    return !first && ch >= '0' && ch <= '9';
}

static int kv_col_at(const char *text, const int *cols, int len, int i) {
    (void)text;
    if (len == 0) return cols[0];
    return i < len ? cols[i] : cols[len - 1] + 1;
}

/* Splits text[0..len) at `seps` outside brackets into the pieces handed to
 * `piece`; brackets must balance. `what` names the value for messages. */
typedef kv_status (*kv_piece_fn)(void *ctx, const char *text, const int *cols, int len);

static kv_status kv_split(const char *file, int line, const char *text, const int *cols, int len,
                          const char *seps, const char *what, kv_piece_fn piece, void *ctx) {
    int depth = 0, open_at = -1, start = 0;
    for (int i = 0; i <= len; i++) {
        const char ch = i < len ? text[i] : '\0';
        if (i == len || (depth == 0 && strchr(seps, ch) != NULL)) {
            if (i < len || depth == 0) {
                if (i == start) {
                    return kv_spec_error(KV_ERR_INVALID_ARG, file, line,
                                         kv_col_at(text, cols, len, i),
                                         "empty alternative in %s", what);
                }
                kv_status st = piece(ctx, text + start, cols + start, i - start);
                if (st != KV_OK) return st;
                start = i + 1;
            }
        } else if (ch == '[') {
            if (depth++ == 0) open_at = i;
        } else if (ch == ']') {
            if (depth == 0) {
                return kv_spec_error(KV_ERR_INVALID_ARG, file, line, cols[i],
                                     "unbalanced ']' in %s", what);
            }
            depth--;
        }
    }
    if (depth > 0) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, line, cols[open_at],
                             "unclosed '[' in %s", what);
    }
    return KV_OK;
}

typedef struct kv_alt_sink {
    kv_spec_option *o;
    int axis;
} kv_alt_sink;

static kv_status kv_add_alt_piece(void *ctx, const char *text, const int *cols, int len) {
    kv_alt_sink *s = ctx;
    return kv_spec_option_add_alt(s->o, s->axis, text, cols, len);
}

typedef struct kv_args_sink {
    kv_spec_option *o;
    const char *file;
    int line;
    const char *what;
    int axis;                    /* the last argument's axis; -1 before the first */
} kv_args_sink;

/* One ','- or ';'-separated piece of --args. "name=value" starts a new
 * axis labelled `name`; a piece that does not start with a name and '='
 * is one more alternative of the argument before it, so every option
 * separates alternatives with ',' (--args=dim=0,1,keepdim=0,1). The old
 * '|' between alternatives is refused, naming the new form. */
static kv_status kv_add_arg_piece(void *ctx, const char *text, const int *cols, int len) {
    kv_args_sink *s = ctx;
    int depth = 0;
    for (int i = 0; i < len; i++) {
        depth += text[i] == '[' ? 1 : (text[i] == ']' ? -1 : 0);
        if (depth == 0 && text[i] == '|') {
            return kv_spec_error(KV_ERR_INVALID_ARG, s->file, s->line, cols[i],
                                 "'|' between alternatives is no longer accepted in %s: write them with ',' "
                                 "as in every option (--args=dim=0,1,keepdim=0,1), got '%.*s'", s->what, len, text);
        }
    }
    int eq = 0;
    while (eq < len && text[eq] != '=') eq++;
    bool named = eq > 0 && eq < len;
    for (int i = 0; named && i < eq; i++) named = kv_is_name_char(text[i], i == 0);
    if (!named) {
        if (s->axis < 0) {
            return kv_spec_error(KV_ERR_INVALID_ARG, s->file, s->line, cols[0],
                                 "expected name=value in %s, got '%.*s'", s->what, len, text);
        }
        return kv_spec_option_add_alt(s->o, s->axis, text, cols, len);
    }
    if (eq + 1 == len) {
        return kv_spec_error(KV_ERR_INVALID_ARG, s->file, s->line, cols[0],
                             "empty value of '%.*s' in %s", eq, text, s->what);
    }
    char name[KV_SCHEMA_NAME_MAX];
    if (eq >= (int)sizeof name) {
        return kv_spec_error(KV_ERR_INVALID_ARG, s->file, s->line, cols[0],
                             "argument name '%.*s' is too long", eq, text);
    }
    memcpy(name, text, (size_t)eq);
    name[eq] = '\0';
    for (int i = 0; i < s->o->naxes; i++) {
        if (strcmp(s->o->axes[i].label, name) == 0) {
            return kv_spec_error(KV_ERR_INVALID_ARG, s->file, s->line, cols[0],
                                 "argument '%s' given twice in %s (first at column %d)", name,
                                 s->what, s->o->axes[i].label_col);
        }
    }
    const int axis = kv_spec_option_add_axis(s->o, name, cols[0]);
    if (axis < 0) return kv_oom();
    s->axis = axis;
    return kv_spec_option_add_alt(s->o, axis, text + eq + 1, cols + eq + 1, len - eq - 1);
}

static kv_status kv_build_option(kv_spec_option *o, kv_option_split split, const char *file,
                                 int line, const char *key, const char *text, const int *cols,
                                 int len) {
    char what[80];
    snprintf(what, sizeof what, "--%s", key);
    switch (split) {
    case KV_SPLIT_LIST: {
        const int axis = kv_spec_option_add_axis(o, NULL, cols[0]);
        if (axis < 0) return kv_oom();
        kv_alt_sink s = { o, axis };
        return kv_split(file, line, text, cols, len, ",", what, kv_add_alt_piece, &s);
    }
    case KV_SPLIT_WHOLE: {
        const int axis = kv_spec_option_add_axis(o, NULL, cols[0]);
        if (axis < 0) return kv_oom();
        return kv_spec_option_add_alt(o, axis, text, cols, len);
    }
    case KV_SPLIT_ARGS: {
        kv_args_sink s = { o, file, line, what, -1 };
        return kv_split(file, line, text, cols, len, ",;", what, kv_add_arg_piece, &s);
    }
    }
    return kv_error(KV_ERR_INTERNAL, "case grammar: bad split kind %d", (int)split);
}

static void kv_option_names(char *buf, int cap) {
    int n = 0;
    buf[0] = '\0';
    for (int i = 0; i < kv_case_option_count && n < cap; i++) {
        n += snprintf(buf + n, (size_t)(cap - n), "%s%s", i ? ", " : "", kv_case_options[i].name);
    }
    if (n < cap) snprintf(buf + n, (size_t)(cap - n), ", batch, reset");
}

/* Turns one token into an option of `ln`. */
static kv_status kv_line_add_token(kv_line *ln, const char *file, const kv_tok *t) {
    const char *s = t->text;
    if (t->len < 3 || s[0] != '-' || s[1] != '-' || !kv_is_name_char(s[2], true)) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col,
                             "expected an option --key=value, got '%s'", s);
    }
    int eq = 2;
    while (eq < t->len && s[eq] != '=') eq++;
    char key[64];
    const int klen = eq - 2;
    if (klen >= (int)sizeof key) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col, "unknown option '%.*s'",
                             eq, s);
    }
    memcpy(key, s + 2, (size_t)klen);
    key[klen] = '\0';
    const bool has_value = eq < t->len;
    if (strcmp(key, "reset") == 0) {
        if (has_value) {
            return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col,
                                 "--reset takes no value");
        }
        ln->reset = true;
        return KV_OK;
    }
    const bool is_batch = strcmp(key, "batch") == 0;
    const int row = is_batch ? -1 : kv_case_option_find(key);
    if (!is_batch && row < 0) {
        char names[256];
        kv_option_names(names, sizeof names);
        return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col,
                             "unknown option '--%s' (options: %s)", key, names);
    }
    if (!has_value) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col,
                             "option '--%s' needs a value: --%s=...", key, key);
    }
    const int vlen = t->len - eq - 1;
    if (vlen == 0) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col,
                             "option '--%s' has an empty value", key);
    }
    if (!is_batch && ln->opts[row] != NULL) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col,
                             "option '--%s' given twice on one line (first at column %d)", key,
                             ln->opts[row]->col);
    }
    if (is_batch && ln->nbatches == KV_SPEC_MAX_OPTIONS) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, t->line, t->col,
                             "too many --batch options on one line (at most %d)",
                             KV_SPEC_MAX_OPTIONS);
    }
    kv_spec_option *o = kv_spec_option_new(row, file, t->line, t->col);
    if (o == NULL) return kv_oom();
    const kv_option_split split = is_batch ? KV_SPLIT_LIST : kv_case_options[row].split;
    kv_status st = kv_build_option(o, split, file, t->line, key, s + eq + 1, t->cols + eq + 1, vlen);
    if (st == KV_OK && !is_batch && kv_case_options[row].check != NULL) {
        const kv_option_ctx ctx = { .opt = o };
        for (int a = 0; st == KV_OK && a < o->naxes; a++) {
            for (int j = 0; st == KV_OK && j < o->axes[a].nalts; j++) {
                st = kv_case_options[row].check(&ctx, a, &o->axes[a].alts[j]);
            }
        }
    }
    if (st != KV_OK) {
        kv_spec_option_release(o);
        return st;
    }
    if (is_batch) {
        ln->batches[ln->nbatches++] = o;
    } else {
        ln->opts[row] = o;
        if (ln->first_opt_col == 0) ln->first_opt_col = t->col;
        if (row == kv_case_option_op_row() || (row == kv_case_option_program_row() && ln->op_col == 0))
            ln->op_col = t->col;
    }
    return KV_OK;
}

/* ---- files, includes, defaults ---- */

typedef struct kv_gstate {
    kv_spec_list *out;
    int depth;                                   /* files open right now */
    char *chain_real[KV_GRAMMAR_MAX_DEPTH + 1];  /* for cycle detection */
    const char *chain_disp[KV_GRAMMAR_MAX_DEPTH + 1]; /* for the message */
} kv_gstate;

static kv_status kv_parse_buffer(kv_gstate *g, const char *file, const char *text,
                                 const kv_case_spec *inherited);

/* Overlays the line's options on `dst`. */
static void kv_overlay(kv_case_spec *dst, const kv_line *ln, bool inherited) {
    for (int i = 0; i < KV_SPEC_MAX_OPTIONS; i++) {
        if (ln->opts[i] == NULL) continue;
        kv_spec_option_release(dst->opts[i]);
        kv_spec_option_retain(ln->opts[i]);
        dst->opts[i] = ln->opts[i];
        dst->inherited[i] = inherited;
    }
}

/* Reads a whole case file. A case file is text: a FIFO or device
 * (--batch=/dev/zero) would be read until memory runs out, a NUL byte
 * would silently end a line early, and a file past KV_GRAMMAR_MAX_FILE is
 * no hand-written case file; each is refused with `why` saying which. */
static char *kv_read_all(const char *path, char *why, size_t whycap) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, whycap, "%s", strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, whycap, "not a regular file (a case file must be one)");
        fclose(f);
        return NULL;
    }
    if (sb.st_size > KV_GRAMMAR_MAX_FILE) {
        snprintf(why, whycap, "%lld bytes, more than the %d a case file may have", (long long)sb.st_size,
                 KV_GRAMMAR_MAX_FILE);
        fclose(f);
        return NULL;
    }
    size_t cap = (size_t)sb.st_size + 2, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL) {
        snprintf(why, whycap, "out of memory");
        fclose(f);
        return NULL;
    }
    /* The size may change under us; read at most the cap either way. */
    n = fread(buf, 1, cap - 1, f);
    const bool bad = ferror(f) != 0;
    fclose(f);
    if (bad || n > (size_t)KV_GRAMMAR_MAX_FILE) {
        snprintf(why, whycap, bad ? "read error" : "grew past %d bytes while being read", KV_GRAMMAR_MAX_FILE);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    const size_t len = strlen(buf);
    if (len != n) {
        int line = 1, col = 1;
        for (size_t i = 0; i < len; i++, col++)
            if (buf[i] == '\n') line++, col = 0;
        snprintf(why, whycap, "a NUL byte at line %d, column %d (not a text file?)", line, col);
        free(buf);
        return NULL;
    }
    return buf;
}

static kv_status kv_include(kv_gstate *g, const char *from, bool from_cmdline, int line,
                            const kv_spec_alt *path, const kv_case_spec *defaults) {
    const int col = path->cols[0];
    char disp[PATH_MAX];
    const char *slash = strrchr(from, '/');
    if (path->text[0] == '/' || from_cmdline || slash == NULL) {
        snprintf(disp, sizeof disp, "%s", path->text);
    } else {
        snprintf(disp, sizeof disp, "%.*s/%s", (int)(slash - from), from, path->text);
    }
    char *real = realpath(disp, NULL);
    if (real == NULL) {
        return kv_spec_error(KV_ERR_INVALID_ARG, from, line, col, "--batch: cannot open '%s': %s",
                             disp, strerror(errno));
    }
    for (int i = 0; i < g->depth; i++) {
        if (strcmp(g->chain_real[i], real) != 0) continue;
        char chain[600];
        int n = 0;
        for (int j = i; j < g->depth && n < (int)sizeof chain; j++) {
            n += snprintf(chain + n, sizeof chain - (size_t)n, "%s -> ", g->chain_disp[j]);
        }
        if (n < (int)sizeof chain) snprintf(chain + n, sizeof chain - (size_t)n, "%s", disp);
        free(real);
        return kv_spec_error(KV_ERR_INVALID_ARG, from, line, col, "--batch include cycle: %s",
                             chain);
    }
    if (g->depth >= KV_GRAMMAR_MAX_DEPTH) {
        free(real);
        return kv_spec_error(KV_ERR_INVALID_ARG, from, line, col,
                             "--batch: includes nested deeper than %d", KV_GRAMMAR_MAX_DEPTH);
    }
    char why[160];
    char *text = kv_read_all(disp, why, sizeof why);
    if (text == NULL) {
        free(real);
        return kv_spec_error(KV_ERR_INVALID_ARG, from, line, col, "--batch: cannot read '%s': %s",
                             disp, why);
    }
    kv_status st = kv_parse_buffer(g, disp, text, defaults);
    free(text);
    free(real);
    return st;
}

/* What one logical line does: a case, an include, or new defaults. */
static kv_status kv_do_line(kv_gstate *g, const char *file, bool cmdline, int line, kv_line *ln,
                            kv_case_spec *defaults, const kv_case_spec *inherited) {
    const int op_row = kv_case_option_op_row();
    /* --program= makes a case line too: a program case. */
    const bool has_op = ln->opts[op_row] != NULL || ln->opts[kv_case_option_program_row()] != NULL;
    if (ln->reset) {
        /* Back to what the file was included with: a --batch line's
         * options (cases/accel.case's --device=accel) outlive the
         * included file's own --reset. */
        kv_case_spec_clear(defaults);
        if (inherited != NULL) kv_case_spec_copy(defaults, inherited);
    }
    if (has_op && ln->nbatches > 0) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, ln->batches[0]->line, ln->batches[0]->col,
                             "--batch cannot be on a case line (one with --op=)");
    }
    if (has_op) {
        kv_case_spec spec;
        kv_case_spec_copy(&spec, defaults);
        for (int i = 0; i < KV_SPEC_MAX_OPTIONS; i++) spec.inherited[i] = spec.opts[i] != NULL;
        kv_overlay(&spec, ln, false);
        snprintf(spec.origin.file, sizeof spec.origin.file, "%s", file);
        spec.origin.line = line;
        spec.op_col = ln->op_col;
        kv_status st = kv_spec_list_push(g->out, &spec);
        kv_case_spec_clear(&spec);
        return st;
    }
    if (ln->nbatches > 0) {
        kv_case_spec sub;
        kv_case_spec_copy(&sub, defaults);
        kv_overlay(&sub, ln, true);
        kv_status st = KV_OK;
        for (int b = 0; st == KV_OK && b < ln->nbatches; b++) {
            const kv_spec_axis *ax = &ln->batches[b]->axes[0];
            for (int j = 0; st == KV_OK && j < ax->nalts; j++) {
                st = kv_include(g, file, cmdline, ln->batches[b]->line, &ax->alts[j], &sub);
            }
        }
        kv_case_spec_clear(&sub);
        return st;
    }
    if (cmdline && ln->first_opt_col > 0) {
        return kv_spec_error(KV_ERR_INVALID_ARG, file, line, ln->first_opt_col,
                             "nothing to run: give --op= or --batch=");
    }
    kv_overlay(defaults, ln, true);
    return KV_OK;
}

static kv_status kv_parse_buffer(kv_gstate *g, const char *file, const char *text,
                                 const kv_case_spec *inherited) {
    char *real = realpath(file, NULL);
    if (real == NULL) {
        const size_t n = strlen(file) + 1;
        real = malloc(n);
        if (real == NULL) return kv_oom();
        memcpy(real, file, n);
    }
    g->chain_real[g->depth] = real;
    g->chain_disp[g->depth] = file;
    g->depth++;

    kv_case_spec defaults;
    kv_case_spec_copy(&defaults, inherited);
    kv_lexer lx = { text, file, 1 };
    kv_toks toks = { 0 };
    kv_status st = KV_OK;
    for (;;) {
        int first_line;
        bool got;
        if ((st = kv_lex_line(&lx, &toks, &first_line, &got)) != KV_OK || !got) break;
        if (toks.n == 0) continue;
        kv_line ln = { 0 };
        for (int i = 0; st == KV_OK && i < toks.n; i++) st = kv_line_add_token(&ln, file, &toks.items[i]);
        if (st == KV_OK) st = kv_do_line(g, file, false, first_line, &ln, &defaults, inherited);
        kv_line_free(&ln);
        if (st != KV_OK) break;
    }
    kv_toks_free(&toks);
    kv_case_spec_clear(&defaults);
    g->depth--;
    free(g->chain_real[g->depth]);
    return st;
}

kv_status kv_grammar_parse_text(const char *name, const char *text, kv_spec_list *out) {
    kv_gstate g = { .out = out };
    kv_case_spec none = { 0 };
    return kv_parse_buffer(&g, name, text, &none);
}

kv_status kv_grammar_parse_file(const char *path, kv_spec_list *out) {
    char why[160];
    char *text = kv_read_all(path, why, sizeof why);
    if (text == NULL) {
        return kv_error(KV_ERR_INVALID_ARG, "%s: cannot read case file: %s", path, why);
    }
    kv_status st = kv_grammar_parse_text(path, text, out);
    free(text);
    return st;
}

kv_status kv_grammar_parse_argv(int argc, char *const argv[], kv_grammar_skip_fn skip, void *ctx,
                                kv_spec_list *out) {
    kv_gstate g = { .out = out };
    kv_toks toks = { 0 };
    kv_status st = KV_OK;
    int col = argc > 0 ? (int)strlen(argv[0]) + 2 : 1;
    for (int i = 1; st == KV_OK && i < argc; i++) {
        const int len = (int)strlen(argv[i]);
        if (skip == NULL || !skip(argv[i], ctx)) {
            st = kv_toks_start(&toks, 1, col);
            for (int k = 0; st == KV_OK && k < len; k++) {
                st = kv_tok_append(&toks.items[toks.n - 1], argv[i][k], col + k);
            }
        }
        col += len + 1;
    }
    kv_line ln = { 0 };
    for (int i = 0; st == KV_OK && i < toks.n; i++) {
        st = kv_line_add_token(&ln, KV_GRAMMAR_CMDLINE, &toks.items[i]);
    }
    if (st == KV_OK && toks.n > 0) {
        kv_case_spec defaults = { 0 };
        st = kv_do_line(&g, KV_GRAMMAR_CMDLINE, true, 1, &ln, &defaults, NULL);
        kv_case_spec_clear(&defaults);
    }
    kv_line_free(&ln);
    kv_toks_free(&toks);
    return st;
}
