/* vmap levels: a per-thread counter, and the VmapMode key in TLS included
 * while any level is entered. */
#include "kv/vmap.h"

#include "modes/mode_tls.h"

static _Thread_local int t_level;
/* TLS included as it was before the outermost enter (VmapMode's bit). */
static _Thread_local kv_keyset t_included_before;

int kv_vmap_level_enter(void) {
    if (t_level >= KV_VMAP_MAX_LEVELS) {
        kv_error(KV_ERR_INVALID_ARG, "vmap: level_enter: %d levels are already entered (the most that may nest)",
                 KV_VMAP_MAX_LEVELS);
        return -1;
    }
    if (t_level == 0) t_included_before = kv_mode_tls_on(KV_KEY_VMAP_MODE);
    return ++t_level;
}

kv_status kv_vmap_level_exit(int level) {
    if (t_level == 0)
        return kv_error(KV_ERR_INVALID_ARG, "vmap: level_exit: argument 'level': %d, but no vmap level is entered",
                        level);
    if (level != t_level)
        return kv_error(KV_ERR_INVALID_ARG,
                        "vmap: level_exit: argument 'level': %d is not the innermost entered level (%d)", level,
                        t_level);
    if (--t_level == 0) kv_mode_tls_off(KV_KEY_VMAP_MODE, t_included_before);
    return KV_OK;
}

int kv_vmap_current_level(void) { return t_level; }
