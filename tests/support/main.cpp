// The doctest runner for every unit and integration test.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <pthread.h>

#include <cstdio>

namespace {
// Tests fork. Output is block-buffered when it goes to a pipe (CI), so a child would carry a copy
// of what is still buffered and print it again if anything in it flushes: flush before each fork.
const int flush_before_fork = pthread_atfork([] { std::fflush(nullptr); }, nullptr, nullptr);
}  // namespace
