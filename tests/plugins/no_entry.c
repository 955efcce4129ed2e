/* A shared library that is no kvsuite backend: it exports a function,
 * but not kv_backend_entry (tests/test_backend.c). */
int kv_test_not_an_entry(int x);
__attribute__((visibility("default"))) int kv_test_not_an_entry(int x) { return x + 1; }
