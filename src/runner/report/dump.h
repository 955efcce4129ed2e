/* --dump=DIR: a case's inputs and outputs as .npy files plus a JSON
 * description, so anyone can reproduce the case in numpy or PyTorch.
 *
 * Layout: DIR/<op>/<16 hex of XXH3-64 of the case ID>/
 *   case.json    {"case_id", "golden_key", "repro", "op", "schema", "fill",
 *                 "seed", "expect", "args": {name: text as given},
 *                 "inputs": [{"file", "arg", "dtype", "npy_descr", "shape",
 *                             "strides", "storage_offset", "layout"}],
 *                 "outputs": [{"file", "dtype", "npy_descr", "shape"}],
 *                 "error": {"code", "message"} when the reference call failed,
 *                 "notes": [...]}
 *   input<i>.npy the logical values of tensor input i (absent inputs have
 *                no file and "file": null); "strides" and "storage_offset"
 *                describe the case's layout (elements), for rebuilding it
 *                with torch.as_strided;
 *   output<i>.npy the reference outputs (CPU kernel, contiguous inputs);
 *   <check>.output<i>.npy, <check>.diff.txt, expected.output<i>.npy
 *                for each failing variants row (kv_case_dump_failure):
 *                that backend's or variant's outputs, the verdict with
 *                the mismatching elements, and what it was compared
 *                against; case.json's "failures" lists them and "files"
 *                says which file is which.
 * bf16 data is written as '<u2' raw bit patterns (numpy has no bf16): in
 * numpy, (x.astype(np.uint32) << 16).view(np.float32); in PyTorch,
 * torch.from_numpy(x.view(np.int16)).view(torch.bfloat16). */
#ifndef KV_RUNNER_DUMP_H
#define KV_RUNNER_DUMP_H

#include "kv/dispatch.h"
#include "runner/case/case.h"
#include "runner/check/result.h"

/* Writes the dump of case c (op resolved) under dir, creating
 * directories as needed. KV_OK, or an error naming the path. */
kv_status kv_case_dump(const kv_case *c, const kv_op *op, const char *dir);

/* After a failing row r of case c (kv_case_dump ran first): writes the
 * row's n outputs `got` and what they were compared against `expected`
 * (either may be NULL), a diff summary, and adds the row to case.json's
 * "failures". KV_OK, or an error naming the path. */
kv_status kv_case_dump_failure(const kv_case *c, const char *dir, const kv_check_result *r,
                               const kv_tensor *const *got, const kv_tensor *const *expected, int n);

/* The directory kv_case_dump writes for c (snprintf style). */
int kv_case_dump_dir(const kv_case *c, const char *dir, char *buf, int cap);

#endif
