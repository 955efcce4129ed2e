/* The libFuzzer entry points every harness in tests/fuzz defines. The same
 * object links two ways (build.ninja, "fuzzing"): with libFuzzer's main in
 * the clang config (build-fuzz/fuzz/fuzz_NAME), and with replay.c's main
 * in any build (build/fuzz/replay_NAME FILE|DIR...), which runs the seed
 * corpus and every saved crash input once, so they stay regressions under
 * gcc, Valgrind and the sanitizer build. */
#ifndef KV_TESTS_FUZZ_H
#define KV_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Called once before the first input (kv_init and the harness's set-up);
 * returns 0. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
/* One input. Returns 0; a bug is a crash, a sanitizer report or abort()
 * from one of the harness's own checks. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with a message when cond is false: a property the harness checks
 * on every input (what parsing promises), kept on in every build. */
#define KV_FUZZ_CHECK(cond, ...) \
    ((cond) ? (void)0 : kv_fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__))
void kv_fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#endif
