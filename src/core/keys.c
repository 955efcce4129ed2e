/* Key names and key set formatting. The spellings are PyTorch's, so
 * messages and reports read like PyTorch's, except that PyTorch's Python
 * key is called Trace here (see DESIGN.md section 3). */
#include "kv/keys.h"

#include <stdio.h>
#include <string.h>

static char g_plugin_names[4][32];

static bool is_plugin_slot(kv_key k) { return k >= KV_KEY_PLUGIN0 && k <= KV_KEY_PLUGIN3; }

int kv_key_set_plugin_name(kv_key k, const char *name) {
    if (!is_plugin_slot(k) || (name != NULL && strlen(name) >= sizeof g_plugin_names[0])) return -1;
    snprintf(g_plugin_names[k - KV_KEY_PLUGIN0], sizeof g_plugin_names[0], "%s", name ? name : "");
    return 0;
}

const char *kv_key_plugin_name(kv_key k) {
    if (!is_plugin_slot(k) || g_plugin_names[k - KV_KEY_PLUGIN0][0] == '\0') return NULL;
    return g_plugin_names[k - KV_KEY_PLUGIN0];
}

const char *kv_key_name(kv_key k) {
    const char *plugin = kv_key_plugin_name(k);
    if (plugin != NULL) return plugin;
    switch (k) {
    case KV_KEY_CPU: return "CPU";
    case KV_KEY_CUDA: return "CUDA";
    case KV_KEY_SIM: return "SIM";
    case KV_KEY_ACCEL: return "Accel";
    case KV_KEY_PLUGIN0: return "Plugin0";
    case KV_KEY_PLUGIN1: return "Plugin1";
    case KV_KEY_PLUGIN2: return "Plugin2";
    case KV_KEY_PLUGIN3: return "Plugin3";
    case KV_KEY_BACKEND_SELECT: return "BackendSelect";
    case KV_KEY_TRACE: return "Trace";
    case KV_KEY_FUNCTIONALIZE: return "Functionalize";
    case KV_KEY_CONJUGATE: return "Conjugate";
    case KV_KEY_NEGATIVE: return "Negative";
    case KV_KEY_ZERO_TENSOR: return "ZeroTensor";
    case KV_KEY_AD_INPLACE_OR_VIEW: return "ADInplaceOrView";
    case KV_KEY_AUTOGRAD: return "Autograd";
    case KV_KEY_AUTOCAST: return "Autocast";
    case KV_KEY_BATCHED: return "Batched";
    case KV_KEY_VMAP_MODE: return "VmapMode";
    case KV_KEY_ACCEL_BOXING: return "AccelBoxing";
    case KV_KEY_COUNT: return "None"; /* KV_KEY_NONE: highest key of an empty set */
    }
    return "?";
}

int kv_key_parse(const char *name, kv_key *out) {
    if (name == NULL) return -1;
    for (int k = 0; k < KV_KEY_COUNT; k++) {
        if (strcmp(name, kv_key_name((kv_key)k)) == 0) {
            if (out) *out = (kv_key)k;
            return 0;
        }
    }
    return -1;
}

/* Returns the full length like snprintf, so callers can detect truncation;
 * bits beyond the last key (a corrupted set) show as "bitN". */
int kv_keyset_format(kv_keyset ks, char *buf, int cap) {
    int len = 0;
    if (cap > 0 && buf) buf[0] = '\0';
    for (int bit = 0; bit < 64; bit++) {
        if (!((ks >> bit) & 1u)) continue;
        int room = (buf && len < cap) ? cap - len : 0;
        char *dst = room > 0 ? buf + len : NULL;
        int n = bit < KV_KEY_COUNT ? snprintf(dst, (size_t)room, "%s%s", len ? "|" : "", kv_key_name((kv_key)bit))
                                   : snprintf(dst, (size_t)room, "%sbit%d", len ? "|" : "", bit);
        if (n > 0) len += n;
    }
    return len;
}
