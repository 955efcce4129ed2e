/* A thin wrapper over libxxhash's XXH3-64 (no seed). */
#include "runner/golden/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "kv/npy.h"

struct kv_hash_stream {
    XXH3_state_t *state;
};

uint64_t kv_hash_bytes(const void *data, size_t n) {
    return (uint64_t)XXH3_64bits(n ? data : "", n);
}

uint64_t kv_hash_string(const char *s) {
    size_t n = 0;
    while (s && s[n]) n++;
    return kv_hash_bytes(s, n);
}

kv_hash_stream *kv_hash_begin(void) {
    kv_hash_stream *h = malloc(sizeof *h);
    if (h == NULL) {
        kv_error(KV_ERR_OOM, "hash: out of memory for a stream");
        return NULL;
    }
    h->state = XXH3_createState();
    if (h->state == NULL) {
        free(h);
        kv_error(KV_ERR_OOM, "hash: out of memory for a stream");
        return NULL;
    }
    XXH3_64bits_reset(h->state);
    return h;
}

void kv_hash_update(kv_hash_stream *h, const void *data, size_t n) {
    if (h && n) XXH3_64bits_update(h->state, data, n);
}

uint64_t kv_hash_end(kv_hash_stream *h) {
    if (h == NULL) return 0;
    uint64_t v = (uint64_t)XXH3_64bits_digest(h->state);
    XXH3_freeState(h->state);
    free(h);
    return v;
}

static int hash_chunk(void *ctx, const void *bytes, size_t n) {
    kv_hash_update(ctx, bytes, n);
    return 0;
}

kv_status kv_hash_tensor(const kv_tensor *t, uint64_t *out) {
    if (out == NULL) return kv_error(KV_ERR_INVALID_ARG, "hash_tensor: argument 'out': NULL");
    kv_hash_stream *h = kv_hash_begin();
    if (h == NULL) return KV_ERR_OOM;
    if (kv_npy_visit(t, hash_chunk, h) != 0) {
        kv_hash_end(h);
        return kv_last_error();
    }
    *out = kv_hash_end(h);
    return KV_OK;
}

char *kv_hash_format(uint64_t h, char buf[KV_HASH_HEX_LEN]) {
    snprintf(buf, KV_HASH_HEX_LEN, "%016llx", (unsigned long long)h);
    return buf;
}

int kv_hash_parse(const char *text, uint64_t *out) {
    if (text == NULL) return -1;
    uint64_t v = 0;
    int i = 0;
    for (; i < 16; i++) {
        char c = text[i];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v << 4 | (uint64_t)d;
    }
    if (text[i] != '\0') return -1;
    if (out) *out = v;
    return 0;
}
