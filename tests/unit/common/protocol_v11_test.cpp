// include/coloc/protocol.h, version 11: Register's step (kRegStep, a Slurm step's label:
// "batch", "extern", "0", ...) round-trips at v11, is left out (with its flag) when speaking to a
// daemon of any older version, is refused from an older peer, must come with its flag (and the
// flag with a step), holds only [A-Za-z0-9._-], and a v10 Register (RegisterV10) is upgraded
// without it, its estimate and environment hash kept.
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

RegisterMsg reg(const char* step, uint16_t flags, uint64_t estimate = 0, uint64_t env_hash = 0) {
  auto r = zeroed<RegisterMsg>();
  r.limit = kNoLimit;
  r.cmdline_hash = 0x1234;
  r.env_hash = env_hash;
  r.estimate = estimate;
  r.flags = flags;
  r.priority = uint8_t(Priority::kNormal);
  set_string(r.job, "slurm-4242");
  set_string(r.cmdline, "python train.py");
  set_string(r.step, step);
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

TEST_CASE("protocol v11: the version and the Register layouts") {
  CHECK(kVersion >= 11);
  CHECK(kStepSize == 16);
  CHECK(sizeof(RegisterV10) == 1664);
  CHECK(sizeof(RegisterMsg) == sizeof(RegisterV10) + kStepSize);
  static_assert(offsetof(RegisterMsg, step) == offsetof(RegisterMsg, cmdline) + kCmdlineSize);
  static_assert(offsetof(RegisterMsg, ledger) == offsetof(RegisterV10, ledger) + kStepSize);
  static_assert(offsetof(RegisterMsg, estimate) == offsetof(RegisterV10, estimate));
  // The pages did not change: a v11 client gets the layout a v10 one gets.
  CHECK(coloc::pages::layout_for_protocol(11) == coloc::pages::layout_for_protocol(10));
  CHECK(last_admin_op(11) == last_admin_op(10));
}

TEST_CASE("protocol v11: valid_step takes 1 to 15 characters of [A-Za-z0-9._-]") {
  for (const char* good : {"batch", "extern", "0", "1", "17", "interactive", "a.b_c-D9", "123456789012345"}) {
    CAPTURE(good);
    CHECK(valid_step(good));
  }
  for (const char* bad : {"", "a b", "1234567890123456", "0/1", "x\ty", "step\n", "caf\xc3\xa9", "a+b", "a:b"}) {
    CAPTURE(bad);
    CHECK_FALSE(valid_step(bad));
  }
  CHECK_FALSE(valid_step(nullptr));
  CHECK_FALSE(valid_step(std::string(40, 'x').c_str()));
}

TEST_CASE("protocol v11: Register's step round-trips, with every other field") {
  for (const char* step : {"batch", "extern", "0", "12", "123456789012345"}) {
    CAPTURE(step);
    std::vector<unsigned char> b;
    REQUIRE(encode_to(reg(step, kRegStep | kRegEstimate | kRegEnvHash, kSixGiB, 0xabcdef), b).status);
    CHECK(b.size() == sizeof(RegisterMsg));
    Message m;
    REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
    CHECK(std::string(m.body.reg.step) == step);
    CHECK(m.body.reg.flags == (kRegStep | kRegEstimate | kRegEnvHash));
    CHECK(m.body.reg.estimate == kSixGiB);
    CHECK(m.body.reg.env_hash == 0xabcdef);
    CHECK(std::string(m.body.reg.job) == "slurm-4242");
    CHECK(std::string(m.body.reg.cmdline) == "python train.py");
    // Re-encoded, the same bytes (the fuzz target's canonical form).
    std::vector<unsigned char> again(kMaxMessage);
    Encoded e = encode_message(m, again.data(), again.size());
    REQUIRE(e.status);
    REQUIRE(e.size == b.size());
    CHECK(std::memcmp(again.data(), b.data(), b.size()) == 0);
  }
  // No step: no flag, an all-zero field.
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg("", 0), b).status);
  Message m;
  REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
  CHECK(m.body.reg.step[0] == '\0');
  CHECK(m.body.reg.flags == 0);
}

TEST_CASE("protocol v11: a step without its flag, the flag without a step, or a step of other characters is malformed") {
  std::vector<unsigned char> b;
  CHECK(encode_to(reg("0", 0), b).status.error == Error::kReserved);
  CHECK(encode_to(reg("", kRegStep), b).status.error == Error::kBadValue);
  CHECK(encode_to(reg("a b", kRegStep), b).status.error == Error::kBadString);
  CHECK(encode_to(reg("0/1", kRegStep), b).status.error == Error::kBadString);
  // Forged on the wire: the daemon refuses them too.
  Message m;
  REQUIRE(encode_to(reg("0", kRegStep), b).status);
  reinterpret_cast<RegisterMsg*>(b.data())->flags = 0;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
  REQUIRE(encode_to(reg("0", kRegStep), b).status);
  std::memset(reinterpret_cast<RegisterMsg*>(b.data())->step, 0, kStepSize);
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kBadValue);
  // No NUL in the field, bytes after the NUL, a forbidden character.
  REQUIRE(encode_to(reg("0", kRegStep), b).status);
  std::memset(reinterpret_cast<RegisterMsg*>(b.data())->step, 'x', kStepSize);
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kBadString);
  REQUIRE(encode_to(reg("0", kRegStep), b).status);
  reinterpret_cast<RegisterMsg*>(b.data())->step[5] = 'x';
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kBadString);
  REQUIRE(encode_to(reg("0", kRegStep), b).status);
  reinterpret_cast<RegisterMsg*>(b.data())->step[0] = ' ';
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kBadString);
}

TEST_CASE("protocol v11: to a v10 daemon the step and its flag are left out (RegisterV10), the estimate and hash kept") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg("batch", kRegStep | kRegEstimate | kRegEnvHash | kRegAnchor, kSixGiB, 0xabcdef), b, 10).status);
  CHECK(b.size() == sizeof(RegisterV10));
  const auto* old = reinterpret_cast<const RegisterV10*>(b.data());
  CHECK(old->flags == (kRegEstimate | kRegEnvHash | kRegAnchor));
  CHECK(old->estimate == kSixGiB);
  CHECK(old->env_hash == 0xabcdef);
  CHECK(std::string(old->cmdline) == "python train.py");
  // And a v10 Register decodes with no step: that process's step is not reported.
  Message m;
  REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
  CHECK(m.h.version == 10);
  CHECK(m.body.reg.step[0] == '\0');
  CHECK(m.body.reg.estimate == kSixGiB);
  CHECK(m.body.reg.env_hash == 0xabcdef);
  CHECK(m.body.reg.flags == (kRegEstimate | kRegEnvHash | kRegAnchor));
  CHECK(m.body.reg.cmdline_hash == 0x1234);
  // Re-encoded at v10, the same bytes.
  std::vector<unsigned char> again(kMaxMessage);
  Encoded e = encode_message(m, again.data(), again.size());
  REQUIRE(e.status);
  REQUIRE(e.size == b.size());
  CHECK(std::memcmp(again.data(), b.data(), b.size()) == 0);
}

TEST_CASE("protocol v11: to a daemon of any older version the step and its flag are left out") {
  for (uint16_t v = kMinVersion; v < 11; ++v) {
    CAPTURE(v);
    std::vector<unsigned char> b;
    REQUIRE(encode_to(reg("0", kRegStep), b, v).status);
    Message m;
    REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));  // what that daemon accepts
    CHECK(m.body.reg.flags == 0);
    CHECK(m.body.reg.step[0] == '\0');
    // With every other flag the client sends, as libcoloc.so does.
    const uint16_t flags = kRegStep | kRegEstimate | kRegEnvHash | (v >= 3 ? kRegAnchor : 0);
    REQUIRE(encode_to(reg("extern", flags, kSixGiB, 0xabcdef), b, v).status);
    REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
    CHECK((m.body.reg.flags & kRegStep) == 0);
    CHECK(m.body.reg.step[0] == '\0');
  }
}

TEST_CASE("protocol v11: a v10 Register (or older) claiming the v11 flag is malformed") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg("", 0), b, 10).status);
  reinterpret_cast<RegisterV10*>(b.data())->flags = kRegStep;
  Message m;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
  REQUIRE(encode_to(reg("", 0), b, 9).status);
  reinterpret_cast<RegisterV9*>(b.data())->flags = kRegStep;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
  // A v11-sized Register under a v10 header is the wrong size for v10, and the other way round.
  REQUIRE(encode_to(reg("0", kRegStep), b).status);
  reinterpret_cast<Header*>(b.data())->version = 10;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kTooLong);
  REQUIRE(encode_to(reg("", 0), b, 10).status);
  reinterpret_cast<Header*>(b.data())->version = 11;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kShort);
}

}  // TEST_SUITE
