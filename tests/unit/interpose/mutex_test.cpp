// Unit tests of the interposer's SpinMutex (interpose/mutex.h): mutual exclusion under contention
// (ThreadSanitizer checks the ordering too), and a holder that sleeps does not make waiters fail.
#include "interpose/mutex.h"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/support/proc.h"

using namespace coloc::interpose;

TEST_SUITE("interpose") {

TEST_CASE("SpinMutex: 4 threads updating plain data under it lose no update") {
  SpinMutex m;
  uint64_t counter = 0, checksum = 0;  // plain: only the lock orders them
  const int per_thread = coloc::test::sanitizer() == "tsan" ? 20000 : 200000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        SpinLock g(m);
        ++counter;
        checksum += uint64_t(t + 1);
      }
    });
  for (auto& t : threads) t.join();
  CHECK(counter == uint64_t(4 * per_thread));
  CHECK(checksum == uint64_t(per_thread) * (1 + 2 + 3 + 4));
}

TEST_CASE("SpinMutex: a waiter gets the lock after a holder that sleeps past the spinning") {
  SpinMutex m;
  m.lock();
  bool got = false;  // written by the waiter under the lock, read after join
  std::thread waiter([&] {
    SpinLock g(m);
    got = true;
  });
  // Long enough for the waiter to spin, yield and reach its sleeping steps.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  m.unlock();
  waiter.join();
  CHECK(got);
  CHECK(m.try_lock());  // and the waiter left it free
  m.unlock();
}

}
