/* kvgen's command line:
 *   kvgen --schema kernels/ops.schema [--accel kernels/accel.conf] --out build/gen
 * Exit 0 on success, 2 on a usage or schema error, 1 when an output file
 * cannot be written. */
#include "tools/kvgen/kvgen.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvgen --schema FILE [--accel CONF] --out DIR\n"
            "\n"
            "Reads the op schemas in FILE (one per line, '#' comments) and writes\n"
            "DIR/kv/op_ids.h, DIR/ops_table.c, DIR/kv/ops.h and DIR/ops_api.c,\n"
            "rewriting a file only when its content changes. With --accel, also\n"
            "reads CONF (lines 'OP TARGET', TARGET one of cpu, sim, cuda, default)\n"
            "and writes DIR/accel_boxing.c, one accel boxing kernel per listed op.\n");
}

/* Accepts "--name VALUE" and "--name=VALUE"; advances *i past VALUE. */
static bool option_value(int argc, char **argv, int *i, const char *name, const char **value) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0) return false;
    if (a[n] == '=') {
        *value = a + n + 1;
        return true;
    }
    if (a[n] != '\0' || *i + 1 >= argc) return false;
    *value = argv[++*i];
    return true;
}

/* accel_boxing.c from the accel.conf at `conf`. */
static int generate_accel(const kv_gen_ops *ops, const char *conf_path, const char *out_dir) {
    kv_gen_accel conf;
    if (kv_gen_accel_load_file(conf_path, ops, &conf) != KV_OK) {
        fprintf(stderr, "%s\n", kv_last_error_message());
        kv_gen_accel_free(&conf);
        return 2;
    }
    int rc = 0;
    kv_gen_buf buf;
    kv_gen_buf_init(&buf);
    char path[4096];
    kv_gen_emit_accel_boxing(ops, &conf, &buf);
    if (snprintf(path, sizeof path, "%s/%s", out_dir, KV_GEN_ACCEL_BOXING_PATH) >= (int)sizeof path) {
        fprintf(stderr, "kvgen: %s: output path too long\n", out_dir);
        rc = 1;
    } else if (buf.failed) {
        fprintf(stderr, "kvgen: out of memory writing %s\n", KV_GEN_ACCEL_BOXING_PATH);
        rc = 1;
    } else if (kv_gen_write_if_changed(path, &buf, NULL) != KV_OK) {
        fprintf(stderr, "kvgen: %s\n", kv_last_error_message());
        rc = 1;
    }
    kv_gen_buf_free(&buf);
    kv_gen_accel_free(&conf);
    return rc;
}

static int generate(const char *schema, const char *accel, const char *out_dir) {
    kv_gen_ops ops;
    if (kv_gen_load_file(schema, &ops) != KV_OK) {
        /* Bare FILE:LINE:COL: so editors and CI annotate the line. */
        fprintf(stderr, "%s\n", kv_last_error_message());
        kv_gen_ops_free(&ops);
        return 2;
    }
    int rc = 0;
    for (int f = 0; f < KV_GEN_FILE_COUNT && rc == 0; f++) {
        kv_gen_buf buf;
        kv_gen_buf_init(&buf);
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", out_dir, kv_gen_file_path((kv_gen_file)f)) >= (int)sizeof path) {
            fprintf(stderr, "kvgen: %s: output path too long\n", out_dir);
            rc = 1;
        } else if (kv_gen_emit(&ops, (kv_gen_file)f, &buf) != KV_OK ||
                   kv_gen_write_if_changed(path, &buf, NULL) != KV_OK) {
            fprintf(stderr, "kvgen: %s\n", kv_last_error_message());
            rc = 1;
        }
        kv_gen_buf_free(&buf);
    }
    if (rc == 0 && accel != NULL) rc = generate_accel(&ops, accel, out_dir);
    kv_gen_ops_free(&ops);
    return rc;
}

int main(int argc, char **argv) {
    const char *schema = NULL, *out_dir = NULL, *accel = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (option_value(argc, argv, &i, "--schema", &schema)) continue;
        if (option_value(argc, argv, &i, "--out", &out_dir)) continue;
        if (option_value(argc, argv, &i, "--accel", &accel)) continue;
        fprintf(stderr, "kvgen: unknown or incomplete option '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }
    if (!schema || !out_dir || !*schema || !*out_dir) {
        fprintf(stderr, "kvgen: --schema and --out are required\n");
        usage(stderr);
        return 2;
    }
    if (accel != NULL && !*accel) {
        fprintf(stderr, "kvgen: --accel needs a file\n");
        usage(stderr);
        return 2;
    }
    return generate(schema, accel, out_dir);
}
