// include/coloc/protocol.h, version 8: the granted priority in RegisterReply and the priority
// policy's target in Admin round-trip at v8, are validated, and are neither sent to nor accepted
// from a v7 peer (those bytes were reserved: zero).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "coloc/protocol.h"

using namespace coloc::proto;

namespace {

template <class T>
T zeroed() {
  T t;
  std::memset(&t, 0, sizeof t);
  return t;
}

RegisterReplyMsg reply(uint8_t granted, uint8_t flags) {
  auto r = zeroed<RegisterReplyMsg>();
  r.epoch = 9;
  r.limit = kNoLimit;
  r.grant_step = 64 << 20;
  r.daemon_version = kVersion;
  r.granted_priority = granted;
  r.priority_flags = flags;
  set_string(r.job, "train-a1b2c3");
  return r;
}

AdminMsg priority_policy(uint8_t target) {
  auto a = zeroed<AdminMsg>();
  a.op = uint32_t(AdminOp::kPolicy);
  a.mode = uint8_t(PolicyMode::kPriority);
  a.target_pct = target;
  set_string(a.job, "0");
  return a;
}

template <class T>
Error encode_error(const T& m, uint16_t version = kVersion) {
  std::vector<unsigned char> buf(kMaxMessage);
  return encode(m, 1, buf.data(), buf.size(), version).status.error;
}

template <class T>
std::vector<unsigned char> enc(const T& m, uint16_t version = kVersion) {
  std::vector<unsigned char> buf(kMaxMessage);
  Encoded e = encode(m, 3, buf.data(), buf.size(), version);
  REQUIRE_MESSAGE(e.status, error_name(e.status.error), " at ", e.status.field);
  buf.resize(e.size);
  return buf;
}

/// Decodes `b` as `who` would, after relabelling it as `version` (0: as it is).
Error decode_error(std::vector<unsigned char> b, Receiver who, uint16_t version = 0, Message* out = nullptr) {
  if (version) reinterpret_cast<Header*>(b.data())->version = version;
  Message m;
  Status s = decode(b.data(), b.size(), who, out ? out : &m);
  return s.error;
}

/// Decoding is canonical: the decoded message encodes back to the same bytes.
bool reencodes(const std::vector<unsigned char>& b, Receiver who) {
  Message m;
  if (!decode(b.data(), b.size(), who, &m)) return false;
  std::vector<unsigned char> again(kMaxMessage);
  Encoded e = encode_message(m, again.data(), again.size());
  return e.status && e.size == b.size() && std::memcmp(again.data(), b.data(), b.size()) == 0;
}

}  // namespace

TEST_SUITE("protocol") {

TEST_CASE("protocol v8: the version, and the layouts did not move") {
  CHECK(kVersion >= 8);
  CHECK(kMinVersion == 1);
  static_assert(offsetof(RegisterReplyMsg, granted_priority) == offsetof(RegisterReplyMsg, daemon_version) + 2);
  static_assert(offsetof(RegisterReplyMsg, priority_flags) == offsetof(RegisterReplyMsg, granted_priority) + 1);
  static_assert(offsetof(RegisterReplyMsg, job) == offsetof(RegisterReplyMsg, daemon_version) + 4);
  static_assert(offsetof(AdminMsg, target_pct) == offsetof(AdminMsg, mode) + 1);
  static_assert(offsetof(AdminMsg, quantum_ms) == offsetof(AdminMsg, target_pct) + 1);
  CHECK(sizeof(RegisterReplyMsg) == 112);
  CHECK(sizeof(AdminMsg) == 104);
}

TEST_CASE("protocol v8: RegisterReply's granted priority round-trips, with the lowered flag") {
  for (Priority p : {Priority::kBestEffort, Priority::kNormal, Priority::kHigh}) {
    CAPTURE(priority_name(p));
    auto b = enc(reply(uint8_t(uint8_t(p) + 1), 0), 8);
    Message m;
    REQUIRE(decode_error(b, Receiver::kClient, 0, &m) == Error::kNone);
    CHECK(m.h.version == 8);
    CHECK(m.body.register_reply.granted_priority == uint8_t(p) + 1);
    CHECK(m.body.register_reply.priority_flags == 0);
    CHECK(reencodes(b, Receiver::kClient));
  }
  // Asked for high, may not have it: the job runs as normal, and the reply says so.
  auto b = enc(reply(uint8_t(Priority::kNormal) + 1, kPriorityLowered));
  Message m;
  REQUIRE(decode_error(b, Receiver::kClient, 0, &m) == Error::kNone);
  CHECK(m.body.register_reply.priority_flags == kPriorityLowered);
  CHECK(Priority(m.body.register_reply.granted_priority - 1) == Priority::kNormal);
  CHECK(reencodes(b, Receiver::kClient));
  // 0: not told (what an older daemon's reply holds), still valid at v8.
  CHECK(encode_error(reply(0, 0)) == Error::kNone);
}

TEST_CASE("protocol v8: RegisterReply's granted priority and flags are validated") {
  CHECK(encode_error(reply(uint8_t(Priority::kHigh) + 2, 0)) == Error::kBadEnum);  // no such priority
  CHECK(encode_error(reply(2, 1u << 1)) == Error::kReserved);                      // an unknown flag
  // Lowered means told, and below high.
  CHECK(encode_error(reply(uint8_t(Priority::kHigh) + 1, kPriorityLowered)) == Error::kBadValue);
  CHECK(encode_error(reply(0, kPriorityLowered)) == Error::kBadValue);
  CHECK(encode_error(reply(uint8_t(Priority::kBestEffort) + 1, kPriorityLowered)) == Error::kNone);
  // The same on the receiving side: the bytes of a bad reply, forged past encode().
  auto b = enc(reply(2, 0));
  reinterpret_cast<RegisterReplyMsg*>(b.data())->granted_priority = 9;
  CHECK(decode_error(b, Receiver::kClient) == Error::kBadEnum);
  reinterpret_cast<RegisterReplyMsg*>(b.data())->granted_priority = 3;
  reinterpret_cast<RegisterReplyMsg*>(b.data())->priority_flags = kPriorityLowered;
  CHECK(decode_error(b, Receiver::kClient) == Error::kBadValue);
  // A daemon never receives a RegisterReply.
  CHECK(decode_error(enc(reply(2, 0)), Receiver::kDaemon) == Error::kBadType);
}

TEST_CASE("protocol v8: a v7 peer neither gets nor sends a granted priority (the bytes were reserved)") {
  // A v8 daemon answering a v7 client: told nothing, the old layout.
  CHECK(encode_error(reply(2, 0), 7) == Error::kBadVersion);
  CHECK(encode_error(reply(1, kPriorityLowered), 7) == Error::kBadVersion);
  auto old = enc(reply(0, 0), 7);
  Message m;
  REQUIRE(decode_error(old, Receiver::kClient, 0, &m) == Error::kNone);
  CHECK(m.h.version == 7);
  CHECK(m.body.register_reply.granted_priority == 0);
  CHECK(reencodes(old, Receiver::kClient));
  // v8 bytes labelled as older versions are malformed (reserved bytes not zero).
  for (uint16_t v : {uint16_t(1), uint16_t(5), uint16_t(7)}) {
    CAPTURE(v);
    CHECK(decode_error(enc(reply(2, 0)), Receiver::kClient, v) == Error::kReserved);
    CHECK(decode_error(enc(reply(2, kPriorityLowered)), Receiver::kClient, v) == Error::kReserved);
  }
}

TEST_CASE("protocol v8: the priority policy's target round-trips and is range-checked") {
  for (uint8_t t : {uint8_t(0), uint8_t(kMinTargetPct), uint8_t(kDefaultTargetPct), uint8_t(kMaxTargetPct)}) {
    CAPTURE(unsigned(t));
    auto b = enc(priority_policy(t));
    Message m;
    REQUIRE(decode_error(b, Receiver::kDaemon, 0, &m) == Error::kNone);
    CHECK(m.body.admin.mode == uint8_t(PolicyMode::kPriority));
    CHECK(m.body.admin.target_pct == t);
    CHECK(reencodes(b, Receiver::kDaemon));
  }
  CHECK(encode_error(priority_policy(uint8_t(kMaxTargetPct + 1))) == Error::kBadValue);
  CHECK(encode_error(priority_policy(255)) == Error::kBadValue);
  static_assert(kMinTargetPct == 1);  // (so 0 is free to mean the default)
  // A target is the priority policy's alone.
  AdminMsg x = priority_policy(10);
  x.mode = uint8_t(PolicyMode::kTimeslice);
  CHECK(encode_error(x) == Error::kBadValue);
  x.mode = uint8_t(PolicyMode::kShare);
  CHECK(encode_error(x) == Error::kBadValue);
  x = priority_policy(10);
  x.quantum_ms = 100;  // and priority has no quantum
  CHECK(encode_error(x) == Error::kBadValue);
  auto s = zeroed<AdminMsg>();
  s.op = uint32_t(AdminOp::kStatus);
  s.target_pct = 5;
  CHECK(encode_error(s) == Error::kReserved);
  auto set = zeroed<AdminMsg>();
  set.op = uint32_t(AdminOp::kSet);
  set.set_fields = kSetPriority;
  set.priority = uint8_t(Priority::kNormal);
  set.target_pct = 5;
  set_string(set.job, "train");
  CHECK(encode_error(set) == Error::kReserved);
  // Forged bytes: the daemon refuses them too.
  auto b = enc(priority_policy(5));
  reinterpret_cast<AdminMsg*>(b.data())->target_pct = 60;
  CHECK(decode_error(b, Receiver::kDaemon) == Error::kBadValue);
}

TEST_CASE("protocol v8: a target is never sent to nor accepted from a v7 peer; the priority mode alone is v7") {
  CHECK(encode_error(priority_policy(10), 7) == Error::kBadVersion);
  CHECK(decode_error(enc(priority_policy(10)), Receiver::kDaemon, 7) == Error::kReserved);
  CHECK(decode_error(enc(priority_policy(10)), Receiver::kDaemon, 6) == Error::kBadEnum);  // (kPolicy itself is v7)
  // Without a target (the default) it is what a v7 peer sends: a v7 daemon answers it itself.
  auto old = enc(priority_policy(0), 7);
  Message m;
  REQUIRE(decode_error(old, Receiver::kDaemon, 0, &m) == Error::kNone);
  CHECK(m.h.version == 7);
  CHECK(m.body.admin.target_pct == 0);
  CHECK(reencodes(old, Receiver::kDaemon));
}

}  // TEST_SUITE
