# tests/pool.sh, sourced: runs the lines of a list file JOBS at a time.
# Test programs are single-threaded and independent (each makes its own
# temp folder), so on a machine with N cores one at a time leaves N-1
# idle: this is what makes the unit tests of the instrumented builds and
# of ninja test take half the time on 2 cores.
#
#   pool_jobs                 the job count: KV_TEST_JOBS, or the online
#                             CPUs (at most 4); an invalid KV_TEST_JOBS is
#                             an error (exit status 2)
#   pool_run LIST LOGS JOBS   runs every line of LIST, NAME<TAB>COMMAND, in
#                             JOBS workers; COMMAND is split into words
#                             (no quoting), its output goes to
#                             LOGS/NAME.log, its exit status to LOGS/NAME.rc
#                             and its seconds to LOGS/NAME.secs (a line
#                             with no .rc never finished)
#   pool_log LOGS NAME        the path prefix of NAME's files
#   pool_order NAME...        the names, the longest-running unit tests
#                             first (measured under Valgrind and gcov: with
#                             test_programs last in name order, its minutes
#                             ran alone at the end while the other workers
#                             sat idle)
#
# A worker claims a line with mkdir, which is atomic: each line runs once
# whatever the number of workers.

pool_jobs() {
    _j=${KV_TEST_JOBS-$(nproc 2>/dev/null || echo 1)}
    case $_j in
    '' | *[!0-9]* | 0)
        echo "KV_TEST_JOBS='$_j': expected a whole number of parallel test programs, 1 or more" >&2
        return 2
        ;;
    esac
    [ -n "${KV_TEST_JOBS-}" ] || [ "$_j" -le 4 ] || _j=4
    echo "$_j"
}

pool_order() {
    _long="test_programs test_checks test_fastpath_check test_dtype test_cpu_variants"
    for _n in $_long; do
        case " $* " in *" $_n "*) echo "$_n" ;; esac
    done
    for _n in "$@"; do
        case " $_long " in *" $_n "*) ;; *) echo "$_n" ;; esac
    done
}

pool_log() { echo "$1/$(echo "$2" | tr / _)"; }

pool_worker() {
    while IFS='	' read -r _name _cmd; do
        _f=$(pool_log "$2" "$_name")
        mkdir "$_f.claim" 2>/dev/null || continue
        _t=$(date +%s)
        _rc=0
        # shellcheck disable=SC2086 # a command line, split into words
        $_cmd >"$_f.log" 2>&1 || _rc=$?
        echo $(($(date +%s) - _t)) >"$_f.secs"
        echo "$_rc" >"$_f.rc"
    done <"$1"
}

pool_run() {
    _w=0
    while [ "$_w" -lt "$3" ]; do
        pool_worker "$1" "$2" &
        _w=$((_w + 1))
    done
    wait
}
