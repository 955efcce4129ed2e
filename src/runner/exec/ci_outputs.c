/* Reports a CI engine asks for at a path of its own: Bazel's
 * XML_OUTPUT_FILE (the test encyclopedia: "location to which test actions
 * should write a test result XML output file"). A copy, so the report
 * folder stays whole for upload and --merge. */
#include "runner/exec/driver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kv_status kv_ci_xml_output(const char *report_dir) {
    const char *dst = getenv("XML_OUTPUT_FILE");
    if (dst == NULL) return KV_OK;
    if (dst[0] == '\0') return kv_error(KV_ERR_INVALID_ARG, "XML_OUTPUT_FILE is empty (Bazel sets it to a path)");
    char src[4096];
    snprintf(src, sizeof src, "%s/junit.xml", report_dir);
    FILE *in = fopen(src, "rb");
    if (in == NULL) {
        const int e = errno;
        return kv_error(KV_ERR_INVALID_ARG, "XML_OUTPUT_FILE: cannot read '%s': %s", src, strerror(e));
    }
    FILE *out = fopen(dst, "wb");
    if (out == NULL) {
        const int e = errno;
        fclose(in);
        return kv_error(KV_ERR_INVALID_ARG, "XML_OUTPUT_FILE='%s': %s", dst, strerror(e));
    }
    char buf[65536];
    size_t k;
    bool ok = true;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0) ok = ok && fwrite(buf, 1, k, out) == k;
    ok = ok && !ferror(in);
    fclose(in);
    if (fclose(out) != 0) ok = false;
    if (!ok) return kv_error(KV_ERR_INVALID_ARG, "XML_OUTPUT_FILE='%s': writing the copy of '%s' failed", dst, src);
    return KV_OK;
}
