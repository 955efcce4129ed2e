/* "Did you mean": how far a misspelt name is from a known one. */
#ifndef KV_RUNNER_SUGGEST_H
#define KV_RUNNER_SUGGEST_H

/* The nearest names are suggested only within this many edits: a third
 * edit already turns most short op names into unrelated ones. */
#define KV_SUGGEST_MAX_EDITS 2

/* Edits (insert, delete, replace, swap two adjacent characters) from a
 * to b; names over 63 characters count as KV_SUGGEST_MAX_EDITS + 1 away. */
int kv_suggest_distance(const char *a, const char *b);

#endif
