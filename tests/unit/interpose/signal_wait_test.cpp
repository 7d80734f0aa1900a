// Unit: SignalWindow's long-wait notice (interpose/signal_wait.h) — said once, from inside a wait
// that has lasted its threshold, never by a wait that ends sooner. The sleeps here are the waits
// under test, not synchronisation.
#include "interpose/signal_wait.h"

#include <doctest/doctest.h>

#include <cstdint>

using namespace coloc::interpose;

namespace {

struct Heard {
  int times = 0;
  uint64_t waited_ns = 0;
  uint64_t again_ns = 0;  ///< what say() asks for (0: never again)
  static uint64_t say(void* ctx, uint64_t waited_ns) {
    auto* h = static_cast<Heard*>(ctx);
    ++h->times;
    h->waited_ns = waited_ns;
    return h->again_ns;
  }
};

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("signal wait: a long wait's notice is said once, after its threshold, from inside the wait") {
  Heard h;
  SignalWindow w;
  w.set_notice(50'000'000ull, &Heard::say, &h);  // 50 ms
  CHECK_FALSE(w.noticed());
  REQUIRE(w.sleep(300'000'000ull));  // several slices past the threshold
  CHECK(h.times == 1);
  CHECK(w.noticed());
  CHECK(h.waited_ns >= 50'000'000ull);
  CHECK(h.waited_ns < 300'000'000ull);  // said at the slice that crossed it, not at the end
  REQUIRE(w.sleep(150'000'000ull));
  CHECK(h.times == 1);  // once per wait
}

TEST_CASE("signal wait: a notice that asks to be called again is, each time its interval has passed") {
  Heard h;
  h.again_ns = 100'000'000ull;  // 100 ms
  SignalWindow w;
  w.set_notice(50'000'000ull, &Heard::say, &h);
  REQUIRE(w.sleep(560'000'000ull));
  // At ~50 ms, then every 100 ms after its last call, each at most a slice late: 2 to 5 calls.
  CHECK(h.times >= 2);
  CHECK(h.times <= 5);
  h.again_ns = 0;
  const int so_far = h.times;
  REQUIRE(w.sleep(400'000'000ull));
  CHECK(h.times == so_far + 1);  // once more, then it asked for no more
  REQUIRE(w.sleep(250'000'000ull));
  CHECK(h.times == so_far + 1);
}

TEST_CASE("signal wait: a wait shorter than the threshold says nothing, and a window without a notice never does") {
  Heard h;
  {
    SignalWindow w;
    w.set_notice(10'000'000'000ull, &Heard::say, &h);  // 10 s
    REQUIRE(w.sleep(20'000'000ull));
    CHECK(w.wait(-1, 5) == 0);
    CHECK(w.wait_uninterrupted(-1, 5) == 0);
    CHECK(w.wait_either(-1, -1, 5, true) == 0);
    CHECK_FALSE(w.noticed());
  }
  SignalWindow plain;
  REQUIRE(plain.sleep(20'000'000ull));
  CHECK_FALSE(plain.noticed());
  CHECK(h.times == 0);
}

}  // TEST_SUITE
