/* Functionalize mode (DESIGN.md section 4): a thread-local mode in which
 * in-place ops run as their functional version plus a copy back, and every
 * op reaching the Functionalize key is recorded in a functional graph.
 *
 * In-place op          runs as                          then
 *   add_.Tensor          add.Tensor(self, other, alpha)   copy_(self, result)
 *   mul_.Tensor          mul.Tensor(self, other)          copy_(self, result)
 *   clamp_.Tensor        clamp.Tensor(self, min, max)     copy_(self, result)
 *   fill_.Scalar         full(self.sizes, value, dtype=self.dtype)
 *   zero_                zeros(self.sizes, dtype=self.dtype)
 *   copy_                _to_copy(src, dtype=self.dtype), expand(to self.sizes)
 * The copy back is a redispatch of copy_ below Functionalize, so observable
 * values (and the single version bump of self) are those of the in-place
 * op; the in-place checks (result dtype castable to self's, broadcast shape
 * equal to self's, no internal overlap) give the in-place op's errors. An
 * op that mutates an argument and has no row in the table is a
 * KV_ERR_MISSING_KERNEL at the key, never silently run. Other ops
 * redispatch below Functionalize unchanged (and are recorded).
 *
 * The graph. Each tensor gets a value id (%0, %1, ...) the first time a
 * recorded node uses or makes it; identity is the kv_tensor object (a view
 * is a new value). A node is an op full name, its tensor inputs (Tensor,
 * Tensor? and the elements of Tensor[], in schema order; an absent Tensor?
 * prints as None) and its tensor outputs. The copy back is a node "copy_"
 * with no outputs (it mutates its first input). While the mode is on the
 * graph holds a reference to every tensor that has an id, so ids are never
 * reused; the outermost exit drops those references and keeps the nodes,
 * so the graph stays readable after the mode ends, until the next
 * outermost enter (which starts an empty graph) or kv_functionalize_graph_clear.
 * The graph is per thread, like the mode. */
#ifndef KV_FUNCTIONALIZE_H
#define KV_FUNCTIONALIZE_H

#include <stdbool.h>

#include "kv/status.h"

/* Enters the mode (nesting counts); the outermost enter adds
 * KV_KEY_FUNCTIONALIZE to TLS included and starts an empty graph. */
kv_status kv_functionalize_enter(void);
/* Leaves one level; the outermost exit removes the key again (unless it
 * was included before) and releases the graph's tensor references.
 * KV_ERR_INVALID_ARG when the mode is not on. */
kv_status kv_functionalize_exit(void);
int kv_functionalize_depth(void);   /* 0 when off */
bool kv_functionalize_active(void);

/* ---- the recorded graph of this thread ---- */
int kv_functionalize_graph_count(void);
const char *kv_functionalize_graph_op(int i);          /* NULL when out of range */
int kv_functionalize_graph_ninputs(int i);             /* -1 when out of range */
int kv_functionalize_graph_noutputs(int i);            /* -1 when out of range */
/* Value id of input/output j of node i; -1 for an absent Tensor? input or
 * an index out of range. */
int kv_functionalize_graph_input(int i, int j);
int kv_functionalize_graph_output(int i, int j);
/* The value id the graph gave `t` (borrowed), or -1 if none; for tests
 * that want to name a tensor in the dump. Only while the mode is on. */
struct kv_tensor;
int kv_functionalize_value_id(const struct kv_tensor *t);
/* The whole graph as text, nodes joined by "; ":
 *   "%2 = add.Tensor(%0, %1); copy_(%0, %2)"
 * snprintf style: returns the length the full text needs. */
int kv_functionalize_graph_format(char *buf, int cap);
/* Empties the graph (and, while the mode is on, forgets the value ids). */
void kv_functionalize_graph_clear(void);

/* The functional op an in-place or out= op runs as ("add.Tensor" for
 * "add_.Tensor" and for "add.out"), or NULL when there is none. */
const char *kv_functionalize_functional_op(const char *inplace_full_name);

/* Registers the fallback at KV_KEY_FUNCTIONALIZE (kv_modes_register_all). */
kv_status kv_functionalize_register(void);

#endif
