// libinterpose_next_a.so — a library that looks symbols up with dlsym(RTLD_NEXT, ...), for the
// interposer's dlsym test: the answer must be the definition after *this* library in the search
// order (libinterpose_next_b.so), never one relative to libcoloc.so.
#include <dlfcn.h>

extern "C" {
/// This library's definition: 1 (libinterpose_next_b.so defines 2).
__attribute__((visibility("default"))) int coloc_test_symbol() { return 1; }
/// dlsym(RTLD_NEXT, name) as called from this library. Not a tail call: glibc takes "the caller" from
/// the return address, which a tail call would make our caller's.
__attribute__((visibility("default"))) void* coloc_test_next(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}
}
