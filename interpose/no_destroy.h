// interpose/no_destroy.h — static storage that is constructed at compile time and never destroyed.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// The host's other threads may still call our hooks while exit() runs static destructors; an object
// they use must therefore outlive exit. NoDestroy<T> holds a T built by T's constexpr constructor
// (so it exists before any code runs, even before our constructor) and never runs ~T.
#pragma once

#include <utility>

namespace coloc::interpose {

template <class T>
union NoDestroy {
  T value;
  constexpr NoDestroy() : value() {}
  template <class... A>
  constexpr explicit NoDestroy(A&&... a) : value(std::forward<A>(a)...) {}
  ~NoDestroy() {}
  NoDestroy(const NoDestroy&) = delete;
  NoDestroy& operator=(const NoDestroy&) = delete;
};

}  // namespace coloc::interpose
