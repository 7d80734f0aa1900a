// interpose/quiet_thread.cpp — see quiet_thread.h.
#include "quiet_thread.h"

#include <pthread.h>
#include <signal.h>

#include "glibc_compat.h"

namespace coloc::interpose {

int start_quiet_thread(void* (*fn)(void*), void* arg, size_t stack) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // the new thread inherits the mask
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, stack);
  pthread_t t;
  const int err = pthread_create(&t, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return err;
}

}  // namespace coloc::interpose
