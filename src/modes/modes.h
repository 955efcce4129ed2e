/* The functionality keys above the backends (DESIGN.md section 4): lazy
 * bits, autograd, autocast, functionalize, trace and vmap. Each mode lives
 * in its own file(s) under src/modes and registers its kernels and
 * fallbacks from kv_modes_register_all, which kv_init calls after the
 * backends have registered. */
#ifndef KV_MODES_H
#define KV_MODES_H

#include "kv/status.h"

kv_status kv_modes_register_all(void);

#endif
