/* kvrun, the case runner's command line. For now it reports what the
 * library knows: its version, its ops and which keys have kernels; the
 * case runner proper (DESIGN.md section 6) builds on these flags.
 * Exit 0 on success, 1 when the library fails to initialize, 2 on a usage
 * error. */
#include "kv/kv.h"

#include <stdio.h>
#include <string.h>

#include "kv/op_ids.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvrun [--version | --help | --list-ops]\n"
            "\n"
            "  --version   print the version and the number of ops\n"
            "  --help      print this help\n"
            "  --list-ops  print every op and the keys that have kernels for it\n");
}

static int list_ops(void) {
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
        return 1;
    }
    int n = kv_op_count();
    for (int i = 0; i < n; i++) {
        const kv_op *op = kv_op_at(i);
        if (!op) {
            fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
            return 1;
        }
        printf("%s", kv_op_name(op));
        int nkeys = 0;
        for (int k = 0; k < KV_KEY_COUNT; k++) {
            if (kv_op_entry_kind(op, (kv_key)k) != KV_ENTRY_KERNEL) continue;
            printf("%s%s", nkeys++ ? "," : "\t", kv_key_name((kv_key)k));
        }
        /* A tab-separated second column always exists, so the output
         * splits into two fields even for an op with no kernel. */
        printf("%s\n", nkeys ? "" : "\t-");
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        usage(stderr);
        return 2;
    }
    const char *a = argv[1];
    if (strcmp(a, "--version") == 0) {
        /* The compiled-in op count, so --version works even when
         * initialization would fail. */
        printf("kvrun %s (%d ops)\n", KV_VERSION_STRING, (int)KV_OP_COUNT);
        return 0;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(a, "--list-ops") == 0) return list_ops();
    fprintf(stderr, "kvrun: unknown option '%s'\n", a);
    usage(stderr);
    return 2;
}
