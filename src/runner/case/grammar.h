/* The case grammar (DESIGN.md section 6): one grammar for case files and
 * the kvrun command line, so any case line can be pasted after `kvrun`
 * and any repro line (without `kvrun`) into a case file.
 *
 * Lexing (files and text):
 *   - a line is whitespace-separated tokens (tabs count as one column);
 *   - `#` outside quotes starts a comment that runs to the end of the line;
 *   - blank and comment-only lines are skipped;
 *   - a line whose last character (before any comment and trailing
 *     blanks) is an unquoted `\` continues on the next line; columns in
 *     messages are those of the physical line a token is on;
 *   - single quotes work as in a POSIX shell: '...' is literal (blanks and
 *     `#` included) and the quotes are removed, so repro lines, which quote
 *     values with shell metacharacters, paste back unchanged. A quote must
 *     close on its own line.
 * On the command line every argv element is one token as the shell left it
 * (no comments, quotes or continuations); columns count over the argv joined
 * by single spaces, argv[0] (the program) included.
 *
 * Tokens are `--key=value`, or `--reset` (no value). Values of most keys are
 * comma lists of alternatives ("f32,f64"); commas inside [...] do not split.
 *
 * Lines:
 *   - a line with --op= is a case line: the current defaults with the
 *     line's own options on top (its own win, key by key);
 *   - a line without --op= sets defaults for the following lines of the
 *     same file, key by key over the earlier defaults (a key's whole value
 *     is replaced: a later --args= replaces an earlier --args= entirely);
 *   - --reset clears every default the file set first (in an included
 *     file it goes back to the defaults the file was included with: the
 *     including file's and the --batch line's options), then the rest of
 *     its line applies;
 *   - --batch=FILE[,FILE...] includes case files, each path relative to the
 *     directory of the including file (to the working directory on the
 *     command line). The included file starts from the current defaults
 *     plus the other options of the --batch line (so on the command line
 *     `kvrun --batch=all.case --device=accel` runs all.case on accel unless
 *     a line there says otherwise); defaults it sets do not leak back. A
 *     --batch line cannot also carry --op=. Includes nest at most
 *     KV_GRAMMAR_MAX_DEPTH deep; a cycle is an error naming the chain;
 *   - an option given twice on one line is an error.
 * A command line with case options but neither --op= nor --batch= is an
 * error (it would run nothing).
 *
 * Errors read "FILE:LINE:COL: message" (KV_ERR_INVALID_ARG, KV_ERR_UNKNOWN_OP
 * for an unknown op), FILE being "<command line>" for argv. On error `out`
 * may hold the specs parsed before it; free it either way. */
#ifndef KV_RUNNER_GRAMMAR_H
#define KV_RUNNER_GRAMMAR_H

#include <stdbool.h>

#include "kv/status.h"
#include "runner/case/spec.h"

#define KV_GRAMMAR_MAX_DEPTH 16
/* The largest case file read (bytes): the suite's files are a few KiB. */
#define KV_GRAMMAR_MAX_FILE (16 * 1024 * 1024)
#define KV_GRAMMAR_CMDLINE "<command line>"

/* Appends the specs of a case file. */
kv_status kv_grammar_parse_file(const char *path, kv_spec_list *out);
/* The same for text in memory; `name` stands for its file in messages and
 * is where its --batch paths are relative to. */
kv_status kv_grammar_parse_text(const char *name, const char *text, kv_spec_list *out);

/* Called for each command-line token; true leaves it to the caller (the
 * runner's own flags such as --filter=, --jobs=, positional files). */
typedef bool (*kv_grammar_skip_fn)(const char *arg, void *ctx);
/* Appends the specs of a command line; argv[0] is the program name.
 * `skip` may be NULL. */
kv_status kv_grammar_parse_argv(int argc, char *const argv[], kv_grammar_skip_fn skip, void *ctx,
                                kv_spec_list *out);

#endif
