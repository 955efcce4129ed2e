#include "onednn/onednn.h"
kv_status kv_dnnl_register_norm(kv_key key) { (void)key; return KV_OK; }
