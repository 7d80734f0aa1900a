// libinterpose_next_b.so — the definition that follows libinterpose_next_a.so's (see there).
extern "C" __attribute__((visibility("default"))) int coloc_test_symbol() { return 2; }
