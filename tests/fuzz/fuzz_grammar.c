/* Fuzzes the case grammar and expansion (runner/grammar.h, expand.h):
 * an input is the text of a case file. Beyond not crashing, it checks
 * what the grammar promises:
 *   - an error message starts with FILE:LINE:COL of a file the harness
 *     gave it (the input or one of its includes);
 *   - every case's repro line, pasted back (without "kvrun"), gives
 *     exactly one case with the same canonical ID.
 * --batch= includes resolve next to the input, in a folder the harness
 * fills with two small case files; while an input runs, fopen() (wrapped
 * at link time, -Wl,--wrap=fopen) opens nothing outside that folder, so
 * an input cannot make the grammar read /dev/zero or a FIFO. */
#include "fuzz.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "runner/case/case.h"
#include "runner/case/expand.h"

/* Repro round trips per input: expansion may give up to
 * KV_EXPAND_MAX_CASES cases a line, and each round trip parses again. */
#define ROUND_TRIPS 32

static char g_dir[64];
static char g_name[128];
static bool g_confined;

FILE *__real_fopen(const char *path, const char *mode);
FILE *__wrap_fopen(const char *path, const char *mode);

FILE *__wrap_fopen(const char *path, const char *mode) {
    const size_t n = strlen(g_dir);
    if (g_confined && (strncmp(path, g_dir, n) != 0 || path[n] != '/' || strstr(path + n, "/..") != NULL)) {
        errno = EACCES;
        return NULL;
    }
    return __real_fopen(path, mode);
}

static void write_file(const char *name, const char *text) {
    char path[192];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = __real_fopen(path, "w");
    KV_FUZZ_CHECK(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    KV_FUZZ_CHECK(kv_init() == KV_OK, "kv_init: %s", kv_last_error_message());
    snprintf(g_dir, sizeof g_dir, "/tmp/kv_fuzz_grammar_XXXXXX");
    KV_FUZZ_CHECK(mkdtemp(g_dir) != NULL, "mkdtemp failed");
    write_file("defaults.case", "# defaults for an including file\n--dtype=f32,f64 --shape=4x5,[]\n");
    write_file("unary.case", "--op=neg\n--batch=defaults.case\n--op=abs --fill=exact\n");
    snprintf(g_name, sizeof g_name, "%s/input.case", g_dir);
    return 0;
}

/* "kvrun --op=..." parsed back as one case line. */
static void check_round_trip(const kv_case *c) {
    char id[2048], repro[4096], id2[2048];
    const int idn = kv_case_id(c, id, (int)sizeof id);
    const int rn = kv_case_repro(c, repro, (int)sizeof repro);
    if (idn >= (int)sizeof id || rn >= (int)sizeof repro) return; /* truncated: nothing to compare */
    KV_FUZZ_CHECK(strncmp(repro, "kvrun ", 6) == 0, "repro line '%s'", repro);
    kv_case_list again = { 0 };
    g_confined = true;
    const kv_status st = kv_cases_from_text("<repro>", repro + 6, &again);
    g_confined = false;
    KV_FUZZ_CHECK(st == KV_OK, "case %s: repro line '%s' does not parse: %s", id, repro, kv_last_error_message());
    KV_FUZZ_CHECK(again.n == 1, "case %s: repro line '%s' gives %d cases", id, repro, again.n);
    kv_case_id(&again.items[0], id2, (int)sizeof id2);
    KV_FUZZ_CHECK(strcmp(id, id2) == 0, "repro line '%s': ID %s became %s", repro, id, id2);
    kv_case_list_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    kv_case_list cases = { 0 };
    g_confined = true;
    const kv_status st = kv_cases_from_text(g_name, text, &cases);
    g_confined = false;
    if (st != KV_OK) {
        const char *msg = kv_last_error_message();
        KV_FUZZ_CHECK(strncmp(msg, g_dir, strlen(g_dir)) == 0, "error without FILE:LINE:COL: '%s'", msg);
    } else {
        for (int i = 0; i < cases.n && i < ROUND_TRIPS; i++) check_round_trip(&cases.items[i]);
    }
    kv_case_list_free(&cases);
    kv_error_clear();
    free(text);
    return 0;
}
