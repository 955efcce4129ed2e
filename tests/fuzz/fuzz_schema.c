/* Fuzzes the schema parser (kv/schema.h): an input is one schema line.
 * Beyond not crashing: a schema that parses formats to canonical text
 * that parses again and formats to the same text (kv_schema_format's
 * promise), and a failure is KV_ERR_SCHEMA with a message. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/schema.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    static kv_schema s, again;
    const kv_status st = kv_schema_parse(text, &s);
    if (st != KV_OK) {
        KV_FUZZ_CHECK(st == KV_ERR_SCHEMA, "status %d for '%s'", (int)st, text);
        KV_FUZZ_CHECK(kv_last_error_message()[0] != '\0', "no message for '%s'", text);
    } else {
        char canon[4096], canon2[4096];
        const int n = kv_schema_format(&s, canon, (int)sizeof canon);
        KV_FUZZ_CHECK(n >= 0, "format failed for '%s'", text);
        if (n < (int)sizeof canon) {
            KV_FUZZ_CHECK(kv_schema_parse(canon, &again) == KV_OK, "canonical '%s' of '%s' does not parse: %s",
                          canon, text, kv_last_error_message());
            kv_schema_format(&again, canon2, (int)sizeof canon2);
            KV_FUZZ_CHECK(strcmp(canon, canon2) == 0, "'%s' formats as '%s', which formats as '%s'", text, canon,
                          canon2);
        }
        /* The classifiers read every field; they must not trip on any. */
        (void)kv_schema_is_inplace(&s);
        (void)kv_schema_is_out(&s);
        (void)kv_schema_is_view(&s);
        (void)kv_schema_is_factory(&s);
        for (int i = 0; i < s.nargs; i++) KV_FUZZ_CHECK(kv_schema_arg_index(&s, s.args[i].name) >= 0, "arg %d", i);
    }
    kv_error_clear();
    free(text);
    return 0;
}
