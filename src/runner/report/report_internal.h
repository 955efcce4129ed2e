/* Helpers shared by the report writers (report_util.c); not part of the API
 * kvrun uses, which is report.h. */
#ifndef KV_RUNNER_REPORT_INTERNAL_H
#define KV_RUNNER_REPORT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runner/report/report.h"

/* A report file being written: PATH.tmp, renamed to PATH on close. */
typedef struct kv_report_file {
    FILE *f;
    char *path;
    char *tmp;
} kv_report_file;

/* a + b in a new malloc'd string; NULL when out of memory. */
char *kv_report_dup_join(const char *a, const char *b);
/* DIR/NAME in a new malloc'd string; NULL when out of memory. */
char *kv_report_path_in(const char *dir, const char *name);

/* Opens PATH.tmp for writing; on failure the error names the path. */
kv_status kv_report_file_open(kv_report_file *rf, const char *path);
/* Flushes, closes and renames; any write error that happened on the way
 * (ferror) is reported here with the path. Always releases `rf`. */
kv_status kv_report_file_close(kv_report_file *rf);
/* Closes and removes PATH.tmp, leaving PATH as it was (a writer that
 * failed half way). Keeps the thread's last error. */
void kv_report_file_discard(kv_report_file *rf);

/* Shortest text that reads back as the same double ("0.1", "1e-07");
 * "nan", "inf", "-inf" for the non-finite values. */
void kv_report_fmt_double(double v, char *buf, int cap);
/* report_ulp.c: a mismatching element's ulp distance: the number, "n/a"
 * when meaningless, "sign differs" between nonzero finite values of
 * opposite signs (the count through zero says nothing more). */
void kv_report_fmt_ulp(const kv_mismatch *m, char *buf, int cap);
/* "[0,3]" for a mismatch's multi-index, "[]" for 0-dim. */
void kv_report_fmt_index(const kv_mismatch *m, char *buf, int cap);
/* "2024-05-01T12:00:00Z", or "-" for 0. */
void kv_report_fmt_time(int64_t unix_seconds, char *buf, int cap);

/* Length of the well-formed UTF-8 sequence at `s` (1..4; overlong forms,
 * surrogates and values past U+10FFFF are not well formed), with its code
 * point in *cp; 0 when the bytes at `s` are not well formed. */
int kv_report_utf8_decode(const char *s, uint32_t *cp);

/* Writes `s` escaped for XML 1.0 and HTML text or attribute values: &, <,
 * >, " and ' become references; characters XML 1.0 forbids (control
 * characters other than tab/newline/CR, U+FFFE/U+FFFF) and bytes that are
 * not UTF-8 become visible "\xHH" text. With `attr`, tab, newline and CR
 * are written as character references so attribute normalization keeps
 * them. */
void kv_report_put_escaped(FILE *f, const char *s, bool attr);

/* The console block of one result (status and case ID, check, message,
 * mismatches, repro), which JUnit reuses as its failure text. A row on
 * backend "accel" names ACCEL_TARGET (the run's, from meta.json; NULL or
 * "" when not known): the plugin under test as the accel target is blamed
 * by name, not by its slot. */
void kv_report_put_problem(FILE *out, const kv_check_result *r, const char *accel_target);
/* report_short.c: the grouped short summary of the failing rows among
 * `kept`, the console's last block before the counts; nothing when none
 * fails. ACCEL_TARGET as for kv_report_put_problem. */
void kv_report_short_summary(FILE *out, const kv_result_list *kept, const char *accel_target);
/* The accel target worth naming for row R: ACCEL_TARGET when R is on
 * backend "accel" and the target is known, else NULL. */
const char *kv_report_accel_blame(const kv_check_result *r, const char *accel_target);
/* Whether `out` gets ANSI colour: a terminal, and NO_COLOR unset or empty
 * (no-color.org). */
bool kv_report_use_color(FILE *out);

/* report_heat.c: whether the row records where its wrong elements are
 * (kv_heat, result.h), and its heat map for report.html (inline SVG and a
 * caption; `id` keeps the SVG's pattern id unique in the page); false,
 * writing nothing, when none is recorded. */
bool kv_report_heat_recorded(const kv_heat *h);
bool kv_report_put_heat(FILE *f, const kv_check_result *r, int id);

/* report_tolrule.c: when `message` holds a variants check's " [RULE:
 * REASON]", REASON a rationale of the tolerance table, the rationale
 * (the table's string: one pointer per distinct text), with RULE in
 * `rule` and the message without that bracket in `rest`; NULL, writing
 * neither, when it holds none. */
const char *kv_report_tol_split(const char *message, char *rest, int restcap, char *rule, int rulecap);

/* One results.jsonl line for r, without its newline (report_jsonl.c);
 * malloc'd, NULL when out of memory. */
char *kv_report_result_line(const kv_check_result *r);

#endif
