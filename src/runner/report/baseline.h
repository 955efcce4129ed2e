/* Baselines (`kvrun --baseline=FILE`): the known failures of a run, so CI
 * stays green on them and turns red on anything new, and on a known
 * failure that got fixed (its entry is then stale).
 *
 * File format, one entry per line:
 *   CASE_GLOB [CHECK_GLOB [BACKEND_GLOB]]   # optional comment
 * Fields are separated by spaces or tabs. `#` at the start of a line, or
 * after whitespace, starts a comment; blank lines are ignored. A glob
 * matches the whole text: `*` any run of characters, `?` any one, `\`
 * makes the next character literal, and everything else - brackets
 * included, since every case ID with a shape has them - is literal. A
 * missing CHECK_GLOB or BACKEND_GLOB is `*`. A line with more than three
 * fields is malformed: an error naming file:line. reports/failures.txt,
 * written by every run, is in this format (one entry per failing row).
 *
 * Applying a baseline to results:
 *   FAIL, CRASH, TIMEOUT that match -> XFAIL (the message keeps the
 *                                      original status and names file:line)
 *   PASS that matches a stale entry -> XPASS (non-zero exit); an entry is
 *                                      stale when every row it matches
 *                                      passed; the passing rows of an entry
 *                                      that still excuses a failure stay PASS
 *   ERROR, SKIP, UNSUPPORTED        -> unchanged: a harness or golden
 *                                      problem is never excused.
 * kv_baseline_validate refuses an unknown check or backend name (a name
 * without wildcards); kv_baseline_notes names every entry that matched no
 * row and every stale one. */
#ifndef KV_RUNNER_BASELINE_H
#define KV_RUNNER_BASELINE_H

#include <stdio.h>

#include "runner/check/result.h"

typedef struct kv_baseline kv_baseline;

/* Reads a baseline file. NULL on error (KV_ERR_INVALID_ARG, "baseline:
 * FILE:LINE: reason", or the path and errno text when unreadable). */
kv_baseline *kv_baseline_load(const char *path);
/* Parses baseline text; `name` stands for the file in messages. */
kv_baseline *kv_baseline_parse(const char *text, const char *name);
void kv_baseline_free(kv_baseline *b);

/* Number of entries. */
int kv_baseline_count(const kv_baseline *b);
/* The 1-based line of the first entry matching (case_id, check), or 0. */
int kv_baseline_match(const kv_baseline *b, const char *case_id, const char *check);

/* kv_baseline_match with the row's backend too (NULL: any). */
int kv_baseline_match_row(const kv_baseline *b, const char *case_id, const char *check, const char *backend);

/* KV_ERR_INVALID_ARG naming file:line and the name when an entry's check
 * (the part before ':') or backend has no wildcard and is not a known
 * check or one of `backends`. */
kv_status kv_baseline_validate(const kv_baseline *b, const char *const *backends, int nbackends);

/* After kv_baseline_apply: one "== baseline FILE:LINE: entry '...' ..."
 * line per entry that matched no row or is stale; returns how many. */
int kv_baseline_notes(const kv_baseline *b, FILE *out);

/* Rewrites statuses by the rules above; *n_xfail and *n_xpass (either may
 * be NULL) get the number of results changed to each. */
void kv_baseline_apply(const kv_baseline *b, kv_result_list *results, int *n_xfail, int *n_xpass);

/* kv_baseline_apply in parts, for rows that come in batches (kvrun reads
 * them back case by case): reset, tally every batch (what each entry
 * matches, and whether it matches a failure), then mark every batch. */
void kv_baseline_reset(const kv_baseline *b);
void kv_baseline_tally(const kv_baseline *b, const kv_result_list *rows);
void kv_baseline_mark(const kv_baseline *b, kv_result_list *rows, int *n_xfail, int *n_xpass);

#endif
