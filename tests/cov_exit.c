/* Linked into every program of the coverage build (tests/configs.sh cov,
 * with -Wl,--wrap=_exit): gcov writes its counts from an exit handler,
 * which _exit() skips, so the runner's forked workers (and any child that
 * leaves with _exit) would otherwise add nothing to the report. The child
 * inherits the parent's counts before the fork, so those lines count
 * twice; coverage (hit or not) is what the report shows, and that is
 * unchanged. */
void __gcov_dump(void);
void __real__exit(int status) __attribute__((noreturn));
void __wrap__exit(int status) __attribute__((noreturn));

void __wrap__exit(int status) {
    __gcov_dump();
    __real__exit(status);
}
