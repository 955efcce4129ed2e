/* A guarded CPU allocator for the memory check (DESIGN.md section 6).
 *
 * Each block is laid out as
 *     [header 64][front redzone 64][user bytes ...][back redzone >= 64]
 * with both redzones filled with KV_GUARD_PATTERN; the back redzone starts
 * right after the last requested byte, so even a one-byte overrun shows.
 * New user bytes are filled with the current poison byte, so elements a
 * kernel never writes keep a value that changes with the poison.
 * Redzones are verified when a block is freed (damage is recorded) and on
 * demand (kv_guard_check_block, kv_guard_check_all).
 *
 * One process-wide guard: kv_guard_begin installs it as the CPU allocator
 * (kv_allocator_install), kv_guard_end puts the built-in one back
 * (kv_allocator_cpu_iface). Storages free through the allocator that made
 * them, so guard blocks freed after kv_guard_end still go through the
 * guard and are still verified. A mutex makes it safe for threaded
 * kernels. Not reentrant: one memory check at a time per process (the
 * runner's workers are processes).
 *
 * Backend memory: kv_guard_add_device wraps a backend's allocator the
 * same way. Blocks are allocated larger through the backend's own
 * allocator (its ABI mem ops), the tensor is placed inside, and the
 * redzones and the poison are written, and later read back, through the
 * backend's copies (kv_backend_mem_write/read): the host never touches
 * device memory. kv_guard_end puts the backend's allocator back. */
#ifndef KV_RUNNER_GUARD_ALLOC_H
#define KV_RUNNER_GUARD_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/device.h"
#include "kv/status.h"

#define KV_GUARD_REDZONE 64
#define KV_GUARD_PATTERN 0xCB

/* Installs the guard with `poison` for new blocks and starts a new epoch:
 * free-time damage records and kv_guard_check_all only concern blocks
 * allocated from now on. */
void kv_guard_begin(uint8_t poison);
/* Changes the poison byte of later allocations. */
void kv_guard_set_poison(uint8_t poison);
/* Also guards device type t (a backend's memory) until kv_guard_end.
 * KV_OK, or an error when t has no allocator. */
kv_status kv_guard_add_device(kv_device_type t);
/* Restores the built-in CPU allocator and every added device's own. */
void kv_guard_end(void);

/* Guard blocks of this epoch still live, and their requested bytes. */
int64_t kv_guard_live_blocks(void);
int64_t kv_guard_live_bytes(void);
/* The same for the blocks in memory of device type t only. */
int64_t kv_guard_live_blocks_of(kv_device_type t);
int64_t kv_guard_live_bytes_of(kv_device_type t);

/* Checks the block whose user pointer is `ptr`: 0 intact, 1 damaged
 * (with a description in msg: side, first damaged offset, block size),
 * -1 not a live guard block. */
int kv_guard_check_block(const void *ptr, char *msg, int cap);
/* Checks every live block of this epoch; returns how many are damaged and
 * describes the first. */
int kv_guard_check_all(char *msg, int cap);
/* Damaged blocks found when they were freed during this epoch; describes
 * the first. */
int kv_guard_free_damage(char *msg, int cap);
/* Backend blocks are not given back to the backend when freed while its
 * device is guarded: they are filled with KV_GUARD_PATTERN and kept until
 * this call, which reads each back, gives it back, and returns how many
 * were written after they were freed (describing the first): a kernel
 * that kept a pointer to an earlier call's tensor and wrote through it.
 * `all`: every kept block; otherwise only those freed before the previous
 * call, so that the memory check, calling it after each run, keeps one
 * run's blocks through the next run (where a stale write lands) and holds
 * the same amount at each of its heap and mapping counts. Call it with
 * `all` before kv_guard_end. */
int kv_guard_release_freed(bool all, char *msg, int cap);

#endif
