// include/coloc/protocol.h, version 9: Register's environment hash (kRegEnvHash) round-trips at
// v9, is dropped when speaking to an older daemon, is refused from an older peer, and a v8
// Register (RegisterV8) is upgraded without it; the history admin ops are v9 only; the pages'
// layout 6 (EstimateStats) is the layout a v9 client gets. Also wire::env_fingerprint.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "coloc/pages.h"
#include "coloc/protocol.h"
#include "coloc/wire.h"

using namespace coloc::proto;

namespace {

template <class T>
T zeroed() {
  T t;
  std::memset(&t, 0, sizeof t);
  return t;
}

RegisterMsg reg(uint64_t env_hash, uint16_t flags) {
  auto r = zeroed<RegisterMsg>();
  r.limit = kNoLimit;
  r.cmdline_hash = 0x1234;
  r.env_hash = env_hash;
  r.flags = flags;
  r.priority = uint8_t(Priority::kNormal);
  set_string(r.job, "train");
  set_string(r.cmdline, "python train.py");
  return r;
}

template <class T>
Encoded encode_to(const T& m, std::vector<unsigned char>& buf, uint16_t version = kVersion) {
  buf.assign(kMaxMessage, 0);
  Encoded e = encode(m, 3, buf.data(), buf.size(), version);
  if (e.status) buf.resize(e.size);
  return e;
}

}  // namespace

TEST_SUITE("protocol") {

TEST_CASE("protocol v9: the version and the Register layouts") {
  CHECK(kVersion >= 9);
  CHECK(sizeof(RegisterV8) == 1648);
  CHECK(sizeof(RegisterV9) == sizeof(RegisterV8) + 8);
  static_assert(offsetof(RegisterV9, env_hash) == offsetof(RegisterV9, cmdline_hash) + 8);
  static_assert(offsetof(RegisterMsg, env_hash) == offsetof(RegisterMsg, cmdline_hash) + 8);
  CHECK(coloc::pages::layout_for_protocol(9) == 6);
  CHECK(coloc::pages::layout_for_protocol(8) == 5);
  CHECK(offsetof(coloc::pages::StatsPage, est) + sizeof(coloc::pages::StatsPage::est) <= coloc::pages::kPageSize);
}

TEST_CASE("protocol v9: Register's environment hash round-trips") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg(0xabcdef, kRegEnvHash), b).status);
  CHECK(b.size() == sizeof(RegisterMsg));
  Message m;
  REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
  CHECK(m.body.reg.env_hash == 0xabcdef);
  CHECK(m.body.reg.flags == kRegEnvHash);
  CHECK(std::string(m.body.reg.cmdline) == "python train.py");
}

TEST_CASE("protocol v9: a hash without its flag is malformed") {
  std::vector<unsigned char> b;
  CHECK(encode_to(reg(0xabcdef, 0), b).status.error == Error::kReserved);
  // Forged on the wire: the daemon refuses it too.
  REQUIRE(encode_to(reg(0xabcdef, kRegEnvHash), b).status);
  reinterpret_cast<RegisterMsg*>(b.data())->flags = 0;
  Message m;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
}

TEST_CASE("protocol v9: to a v8 daemon the hash and its flag are left out (RegisterV8)") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg(0xabcdef, kRegEnvHash | kRegAnchor), b, 8).status);
  CHECK(b.size() == sizeof(RegisterV8));
  const auto* old = reinterpret_cast<const RegisterV8*>(b.data());
  CHECK(old->flags == kRegAnchor);
  CHECK(std::string(old->cmdline) == "python train.py");
  // And a v8 Register decodes with no hash: that job gets no history.
  Message m;
  REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));
  CHECK(m.body.reg.env_hash == 0);
  CHECK(m.body.reg.flags == kRegAnchor);
  CHECK(m.body.reg.cmdline_hash == 0x1234);
}

TEST_CASE("protocol v9: to a daemon of any older version the hash and its flag are left out") {
  for (uint16_t v = kMinVersion; v < 9; ++v) {
    CAPTURE(v);
    std::vector<unsigned char> b;
    REQUIRE(encode_to(reg(0xabcdef, kRegEnvHash), b, v).status);
    Message m;
    REQUIRE(decode(b.data(), b.size(), Receiver::kDaemon, &m));  // what that daemon accepts
    CHECK(m.body.reg.flags == 0);
    CHECK(m.body.reg.env_hash == 0);
  }
}

TEST_CASE("protocol v9: a v8 Register claiming the v9 flag is malformed") {
  std::vector<unsigned char> b;
  REQUIRE(encode_to(reg(0, 0), b, 8).status);
  reinterpret_cast<RegisterV8*>(b.data())->flags = kRegEnvHash;
  Message m;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kReserved);
}

TEST_CASE("protocol v9: the history admin ops are v9 only") {
  auto a = zeroed<AdminMsg>();
  a.op = uint32_t(AdminOp::kHistory);
  std::vector<unsigned char> b;
  REQUIRE(encode_to(a, b).status);
  CHECK(encode_to(a, b, 8).status.error == Error::kBadVersion);
  auto f = zeroed<AdminMsg>();
  f.op = uint32_t(AdminOp::kHistoryForget);
  CHECK(encode_to(f, b).status.error == Error::kBadString);  // forget names what it forgets
  set_string(f.job, "0123456789abcdef");
  REQUIRE(encode_to(f, b).status);
  reinterpret_cast<Header*>(b.data())->version = 8;
  Message m;
  CHECK(decode(b.data(), b.size(), Receiver::kDaemon, &m).error == Error::kBadEnum);
}

TEST_CASE("env_fingerprint: the three variables, unset apart from empty") {
  std::map<std::string, std::string> env;
  bool unset_alloc = true;
  auto look = [&](const char* n) -> const char* {
    if (std::string(n) == "PYTORCH_CUDA_ALLOC_CONF" && unset_alloc) return nullptr;
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const uint64_t none = coloc::wire::env_fingerprint(look);
  unset_alloc = false;
  env["PYTORCH_CUDA_ALLOC_CONF"] = "";
  const uint64_t empty = coloc::wire::env_fingerprint(look);
  CHECK(none != empty);
  env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
  const uint64_t set = coloc::wire::env_fingerprint(look);
  CHECK(set != empty);
  env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8";
  CHECK(coloc::wire::env_fingerprint(look) != set);
  env.erase("CUBLAS_WORKSPACE_CONFIG");
  CHECK(coloc::wire::env_fingerprint(look) == set);  // deterministic
  env["UNRELATED"] = "x";
  CHECK(coloc::wire::env_fingerprint(look) == set);  // only the three count
}

}  // TEST_SUITE
