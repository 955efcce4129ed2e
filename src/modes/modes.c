/* One place that knows every mode, so the composition root (src/runtime/init.c)
 * names the modes once. The
 * order matters only for readability: each mode registers at its own key. */
#include "modes/modes.h"

#include "kv/autocast.h"
#include "kv/autograd.h"
#include "kv/functionalize.h"
#include "kv/lazy.h"
#include "kv/trace.h"
#include "kv/vmap.h"

kv_status kv_modes_register_all(void) {
    /* Each mode adds one line: `if ((st = kv_<mode>_register()) != KV_OK) return st;` */
    kv_status st = KV_OK;
    if ((st = kv_trace_register()) != KV_OK) return st;
    if ((st = kv_functionalize_register()) != KV_OK) return st;
    if ((st = kv_autocast_register()) != KV_OK) return st;
    if ((st = kv_lazy_register()) != KV_OK) return st;
    if ((st = kv_vmap_register()) != KV_OK) return st;
    if ((st = kv_autograd_register()) != KV_OK) return st;
    return st;
}
