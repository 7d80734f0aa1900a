// include/coloc/protocol.h, version 10: Register's declared estimate (kRegEstimate) round-trips at
// v10, is left out (with its flag) when speaking to a daemon of any older version, is refused
// from an older peer, must come with its flag (and the flag with an estimate), and a v9 Register
// (RegisterV9) is upgraded without it, its environment hash kept.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "coloc/pages.h"
#include "coloc/protocol.h"

using namespace coloc::proto;

namespace {

template <class T>
T zeroed() {
  T t;
  std::memset(&t, 0, sizeof t);
  return t;
}

RegisterMsg reg(uint64_t estimate, uint16_t flags, uint64_t env_hash = 0) {
  auto r = zeroed<RegisterMsg>();
  r.limit = kNoLimit;
  r.cmdline_hash = 0x1234;
  r.env_hash = env_hash;
  r.estimate = estimate;
  r.flags = flags;
  r.priority = uint8_t(Priority::kNormal);
  set_string(r.job, "train");
  set_string(r.cmdline, "python train.py");
  return r;
}

Encoded encode_to(const RegisterMsg& m, std::vector<unsigned char>& buf, uint16_t version = kVersion) {
  buf.assign(kMaxMessage, 0);
  Encoded e = encode(m, 3, buf.data(), buf.size(), version);
  if (e.status) buf.resize(e.size);
  return e;
}

constexpr uint64_t kSixGiB = 6ull << 30;

}  // namespace

TEST_SUITE("protocol") {

TEST_CASE("protocol v10: the version and the Register layouts") {
  CHECK(kVersion >= 10);
  CHECK(sizeof(RegisterV9) == 1656);
  CHECK(sizeof(RegisterV10) == sizeof(RegisterV9) + 8);
  static_assert(offsetof(RegisterV10, estimate) == offsetof(RegisterV10, env_hash) + 8);
  static_assert(offsetof(RegisterV10, wait_timeout_ns) == offsetof(RegisterV9, wait_timeout_ns) + 8);
  static_assert(offsetof(RegisterMsg, estimate) == offsetof(RegisterMsg, env_hash) + 8);
  // The pages did not change: a v10 client gets the layout a v9 one gets.
  CHECK(coloc::pages::layout_for_protocol(10) == coloc::pages::layout_for_protocol(9));
  CHECK(last_admin_op(10) == last_admin_op(9));
}

TEST_CASE("protocol v10: Register's estimate round-trips") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg(kSixGiB, kRegEstimate | kRegEnvHash, 0xabcdef), b).status);
  CHECK(b.size() == sizeof(RegisterMsg));
  Message m;
  REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
  CHECK(m.body.reg.estimate == kSixGiB);
  CHECK(m.body.reg.env_hash == 0xabcdef);
  CHECK(m.body.reg.flags == (kRegEstimate | kRegEnvHash));
  CHECK(std::string(m.body.reg.cmdline) == "python train.py");
  // Re-encoded, the same bytes (the fuzz target's canonical form).
  std::vector<unsigned char> again(kMaxMessage);
  Encoded e = encode_message(m, again.data(), again.size());
  REQUIRE(e.status);
  REQUIRE(e.size == b.size());
  CHECK(std::memcmp(again.data(), b.data(), b.size()) == 0);
}

TEST_CASE("protocol v10: an estimate without its flag, or the flag without an estimate, is malformed") {
  std::vector<unsigned char> b;
  CHECK(encode_to(reg(kSixGiB, 0), b).status.error == Error::kReserved);
  CHECK(encode_to(reg(0, kRegEstimate), b).status.error == Error::kBadValue);
  // Forged on the wire: the daemon refuses them too.
  REQUIRE(encode_to(reg(kSixGiB, kRegEstimate), b).status);
  reinterpret_cast<RegisterMsg*>(b.data())->flags = 0;
  Message m;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
  REQUIRE(encode_to(reg(kSixGiB, kRegEstimate), b).status);
  reinterpret_cast<RegisterMsg*>(b.data())->estimate = 0;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kBadValue);
}

TEST_CASE("protocol v10: to a v9 daemon the estimate and its flag are left out (RegisterV9), the hash kept") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg(kSixGiB, kRegEstimate | kRegEnvHash | kRegAnchor, 0xabcdef), b, 9).status);
  CHECK(b.size() == sizeof(RegisterV9));
  const auto* old = reinterpret_cast<const RegisterV9*>(b.data());
  CHECK(old->flags == (kRegEnvHash | kRegAnchor));
  CHECK(old->env_hash == 0xabcdef);
  CHECK(std::string(old->cmdline) == "python train.py");
  // And a v9 Register decodes with no estimate: that job gets no declared estimate.
  Message m;
  REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
  CHECK(m.h.version == 9);
  CHECK(m.body.reg.estimate == 0);
  CHECK(m.body.reg.env_hash == 0xabcdef);
  CHECK(m.body.reg.flags == (kRegEnvHash | kRegAnchor));
  CHECK(m.body.reg.cmdline_hash == 0x1234);
  // Re-encoded at v9, the same bytes.
  std::vector<unsigned char> again(kMaxMessage);
  Encoded e = encode_message(m, again.data(), again.size());
  REQUIRE(e.status);
  REQUIRE(e.size == b.size());
  CHECK(std::memcmp(again.data(), b.data(), b.size()) == 0);
}

TEST_CASE("protocol v10: to a daemon of any older version the estimate and its flag are left out") {
  for (uint16_t v = kMinVersion; v < 10; ++v) {
    CAPTURE(v);
    std::vector<unsigned char> b;
    REQUIRE(encode_to(reg(kSixGiB, kRegEstimate), b, v).status);
    Message m;
    REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));  // what that daemon accepts
    CHECK(m.body.reg.flags == 0);
    CHECK(m.body.reg.estimate == 0);
    // With every other flag the client sends, as libcoloc.so and coloc run's anchor do.
    const uint16_t flags = kRegEstimate | kRegEnvHash | (v >= 3 ? kRegAnchor : 0);
    REQUIRE(encode_to(reg(kSixGiB, flags, 0xabcdef), b, v).status);
    REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
    CHECK((m.body.reg.flags & kRegEstimate) == 0);
    CHECK(m.body.reg.estimate == 0);
  }
}

TEST_CASE("protocol v10: a v9 Register (or older) claiming the v10 flag is malformed") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg(0, 0), b, 9).status);
  reinterpret_cast<RegisterV9*>(b.data())->flags = kRegEstimate;
  Message m;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
  REQUIRE(encode_to(reg(0, 0), b, 8).status);
  reinterpret_cast<RegisterV8*>(b.data())->flags = kRegEstimate;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
  // A v10-sized Register under a v9 header is the wrong size for v9.
  REQUIRE(encode_to(reg(kSixGiB, kRegEstimate), b).status);
  reinterpret_cast<Header*>(b.data())->version = 9;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kTooLong);
}

}  // TEST_SUITE
