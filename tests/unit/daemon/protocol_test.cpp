// include/coloc/protocol.h: every message round-trips; every kind of malformed input is refused
// with a reason; the previous version's Register is upgraded with defaults.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

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

DeviceInfo device(uint8_t n, uint64_t cap = 80ull << 30, uint64_t free = kUnknown) {
  DeviceInfo d = zeroed<DeviceInfo>();
  std::memset(d.uuid, 0xC0, 16);
  d.uuid[15] = n;
  d.capacity = cap;
  d.physical_free = free;
  return d;
}

RegisterMsg make_register() {
  auto r = zeroed<RegisterMsg>();
  r.limit = 20ull << 30;
  r.cmdline_hash = 0x1234567890abcdefull;
  r.wait_timeout_ns = 5'000'000'000;
  r.priority = uint8_t(Priority::kHigh);
  r.on_full = uint8_t(OnFull::kFail);
  set_string(r.job, "train-a1b2c3");
  set_string(r.cmdline, "python train.py --lr 0.1 \xc3\xa9");
  return r;
}

template <class T>
std::vector<unsigned char> enc(const T& m, uint32_t seq = 7, uint16_t version = kVersion) {
  std::vector<unsigned char> buf(kMaxMessage);
  Encoded e = encode(m, seq, buf.data(), buf.size(), version);
  REQUIRE_MESSAGE(e.status, error_name(e.status.error), " at ", e.status.field);
  buf.resize(e.size);
  return buf;
}

Status dec(const std::vector<unsigned char>& b, Receiver who, Message* m) { return decode(b.data(), b.size(), who, m); }

/// Decodes as the daemon; returns the error (kNone on success).
Error daemon_error(const std::vector<unsigned char>& b) {
  Message m;
  return dec(b, Receiver::kDaemon, &m).error;
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("protocol: Register round-trips, and its header is filled in") {
  RegisterMsg r = make_register();
  auto b = enc(r, 42);
  CHECK(b.size() == sizeof(RegisterMsg));
  Message m;
  REQUIRE(dec(b, Receiver::kDaemon, &m));
  CHECK(m.type() == MsgType::kRegister);
  CHECK(m.h.seq == 42);
  CHECK(m.h.version == kVersion);
  CHECK(m.h.magic == kMagic);
  CHECK(m.body.reg.limit == r.limit);
  CHECK(m.body.reg.wait_timeout_ns == r.wait_timeout_ns);
  CHECK(std::string(m.body.reg.job) == "train-a1b2c3");
  CHECK(std::string(m.body.reg.cmdline) == std::string(r.cmdline));
  CHECK(std::memcmp(&m.body.reg.ledger, &r.ledger, sizeof r.ledger) == 0);
}

TEST_CASE("protocol: a resume Register carries the ledger") {
  RegisterMsg r = make_register();
  r.flags = kRegResume;
  r.n_ledger = 2;
  for (uint32_t i = 0; i < 2; ++i) {
    r.ledger[i].device = device(uint8_t(i + 1), 80ull << 30, 10ull << 30);
    r.ledger[i].in_use = (3ull + i) << 30;
    r.ledger[i].grant = (4ull + i) << 30;
    r.ledger[i].peak = (5ull + i) << 30;
    r.ledger[i].limit = kNoLimit;
  }
  Message m;
  REQUIRE(dec(enc(r), Receiver::kDaemon, &m));
  CHECK(m.body.reg.n_ledger == 2);
  CHECK(m.body.reg.ledger[1].grant == 5ull << 30);
  CHECK(m.body.reg.ledger[1].device.uuid[15] == 2);

  SUBCASE("without the flag a ledger is refused") {
    r.flags = 0;
    std::vector<unsigned char> buf(kMaxMessage);
    CHECK(encode(r, 1, buf.data(), buf.size()).status.error == Error::kBadCount);
  }
  SUBCASE("a duplicate device is refused") {
    r.ledger[1].device = r.ledger[0].device;
    std::vector<unsigned char> buf(kMaxMessage);
    CHECK(encode(r, 1, buf.data(), buf.size()).status.error == Error::kBadValue);
  }
  SUBCASE("a peak below in-use is refused") {
    r.ledger[0].peak = 0;
    std::vector<unsigned char> buf(kMaxMessage);
    CHECK(encode(r, 1, buf.data(), buf.size()).status.error == Error::kBadValue);
  }
}

TEST_CASE("protocol: a v1 Register is accepted and upgraded with defaults") {
  RegisterMsg r = make_register();
  r.flags = kRegResume;
  r.n_ledger = 1;
  r.ledger[0].device = device(9);
  r.ledger[0].in_use = 1 << 20;
  r.ledger[0].peak = 2 << 20;
  r.ledger[0].grant = 64 << 20;
  r.ledger[0].limit = kNoLimit;
  auto b = enc(r, 5, 1);
  CHECK(b.size() == sizeof(RegisterV1));
  Message m;
  REQUIRE(dec(b, Receiver::kDaemon, &m));
  CHECK(m.h.version == 1);
  CHECK(m.body.reg.wait_timeout_ns == 0);  // the daemon's default
  CHECK(m.body.reg.cmdline[0] == '\0');    // v1 carries no command line
  CHECK(m.body.reg.limit == r.limit);
  CHECK(m.body.reg.cmdline_hash == r.cmdline_hash);
  CHECK(m.body.reg.priority == r.priority);
  CHECK(std::string(m.body.reg.job) == "train-a1b2c3");
  CHECK(m.body.reg.ledger[0].grant == 64 << 20);
  // A v1 header on a v2-sized body is refused: the size must match the version's layout.
  auto v2 = enc(r, 5, 2);
  reinterpret_cast<Header*>(v2.data())->version = 1;
  CHECK(daemon_error(v2) == Error::kTooLong);
}

TEST_CASE("protocol: an anchor Register (v3) is accepted at v3 only, without a ledger") {
  RegisterMsg r = make_register();
  r.flags = kRegAnchor;
  Message m;
  REQUIRE(dec(enc(r), Receiver::kDaemon, &m));
  CHECK(m.body.reg.flags == kRegAnchor);
  CHECK(kVersion >= 3);
  // An older peer cannot send it: encoding refuses, and a v2 or v1 datagram with the bit is malformed.
  std::vector<unsigned char> buf(kMaxMessage);
  CHECK(encode(r, 7, buf.data(), buf.size(), 2).status.error == Error::kReserved);
  CHECK(encode(r, 7, buf.data(), buf.size(), 1).status.error == Error::kReserved);
  r.flags = 0;
  for (uint16_t v : {uint16_t(1), uint16_t(2)}) {
    CAPTURE(v);
    auto b = enc(r, 7, v);
    RegisterV4* raw2 = reinterpret_cast<RegisterV4*>(b.data());
    RegisterV1* raw1 = reinterpret_cast<RegisterV1*>(b.data());
    if (v == 2) raw2->flags = kRegAnchor;
    else raw1->flags = kRegAnchor;
    CHECK(daemon_error(b) == Error::kReserved);
  }
  // An anchor attaches nothing: a resume ledger is refused.
  RegisterMsg led = make_register();
  led.flags = kRegAnchor | kRegResume;
  led.n_ledger = 1;
  led.ledger[0].device.uuid[0] = 1;
  led.ledger[0].device.capacity = 1 << 30;
  led.ledger[0].device.physical_free = kUnknown;
  led.ledger[0].limit = kNoLimit;
  CHECK(encode(led, 7, buf.data(), buf.size()).status.error == Error::kBadCount);
}

TEST_CASE("protocol: a v4 Attach (no caps) is accepted and upgraded; v5 carries each device's cap") {
  auto a = zeroed<AttachMsg>();
  a.n_devices = 2;
  a.devices[0].device = device(1, 80ull << 30);
  a.devices[0].request = 512 << 20;
  a.devices[0].cap = 3ull << 30;
  a.devices[1].device = device(2);
  Message m;
  // v5: the caps travel.
  auto b5 = enc(a);
  CHECK(b5.size() == sizeof(AttachMsg));
  REQUIRE(dec(b5, Receiver::kDaemon, &m));
  CHECK(m.body.attach.devices[0].cap == 3ull << 30);
  CHECK(m.body.attach.devices[1].cap == 0);
  // v4: the old layout, without caps; decoded with cap 0 (none), and re-encoded to the same bytes.
  for (uint16_t v : {uint16_t(1), uint16_t(4)}) {
    CAPTURE(v);
    auto b4 = enc(a, 9, v);
    CHECK(b4.size() == sizeof(AttachV4));
    REQUIRE(dec(b4, Receiver::kDaemon, &m));
    CHECK(m.h.version == v);
    CHECK(m.body.attach.n_devices == 2);
    CHECK(m.body.attach.devices[0].request == 512 << 20);
    CHECK(m.body.attach.devices[0].cap == 0);
    std::vector<unsigned char> again(kMaxMessage);
    Encoded e = encode_message(m, again.data(), again.size());
    REQUIRE(e.status);
    again.resize(e.size);
    CHECK(again == b4);
    // A v5-sized body under a v4 header is refused: the size must match the version's layout.
    auto wrong = b5;
    reinterpret_cast<Header*>(wrong.data())->version = v;
    CHECK(daemon_error(wrong) == Error::kTooLong);
  }
  // A cap of UINT64_MAX is not "none" (0 is): refused.
  a.devices[0].cap = kUnknown;
  std::vector<unsigned char> buf(kMaxMessage);
  CHECK(encode(a, 1, buf.data(), buf.size()).status.error == Error::kBadValue);
}

TEST_CASE("protocol: a resume ledger's cap and overhead are v5 only; older layouts (v1, v2-v4) leave them out") {
  RegisterMsg r = make_register();
  r.flags = kRegResume;
  r.n_ledger = 1;
  r.ledger[0].device = device(9);
  r.ledger[0].grant = 64 << 20;
  r.ledger[0].limit = 2ull << 30;
  r.ledger[0].cap = 2ull << 30;
  r.ledger[0].overhead = 1536ull << 20;
  Message m;
  auto b5 = enc(r);
  CHECK(b5.size() == sizeof(RegisterMsg));
  REQUIRE(dec(b5, Receiver::kDaemon, &m));
  CHECK(m.body.reg.ledger[0].cap == 2ull << 30);
  CHECK(m.body.reg.ledger[0].overhead == 1536ull << 20);
  for (uint16_t v : {uint16_t(1), uint16_t(2), uint16_t(4)}) {
    CAPTURE(v);
    auto b = enc(r, 3, v);
    CHECK(b.size() == (v == 1 ? sizeof(RegisterV1) : sizeof(RegisterV4)));
    REQUIRE(dec(b, Receiver::kDaemon, &m));
    CHECK(m.body.reg.ledger[0].cap == 0);
    CHECK(m.body.reg.ledger[0].overhead == 0);
    CHECK(m.body.reg.ledger[0].limit == 2ull << 30);
    CHECK(m.body.reg.ledger[0].grant == 64 << 20);
    if (v != 1) CHECK(std::string(m.body.reg.cmdline) == std::string(r.cmdline));
    // The decoder is canonical: the upgraded message re-encodes to the bytes it came from.
    std::vector<unsigned char> again(kMaxMessage);
    Encoded e = encode_message(m, again.data(), again.size());
    REQUIRE(e.status);
    again.resize(e.size);
    CHECK(again == b);
    // A v5-sized body under an older header is refused: the size must match the version's layout.
    auto wrong = b5;
    reinterpret_cast<Header*>(wrong.data())->version = v;
    CHECK(daemon_error(wrong) == Error::kTooLong);
  }
  // Below v5 the word was reserved: an older message with it set is malformed.
  auto b4 = enc(r, 3, 4);
  reinterpret_cast<RegisterV4*>(b4.data())->ledger[0].reserved = 1 << 30;
  CHECK(daemon_error(b4) == Error::kReserved);
  auto b1 = enc(r, 3, 1);
  reinterpret_cast<RegisterV1*>(b1.data())->ledger[0].reserved = 1 << 30;
  CHECK(daemon_error(b1) == Error::kReserved);
  // An overhead beyond the device's capacity is malformed.
  r.ledger[0].overhead = r.ledger[0].device.capacity + 1;
  std::vector<unsigned char> buf(kMaxMessage);
  CHECK(encode(r, 1, buf.data(), buf.size()).status.error == Error::kBadValue);
}

TEST_CASE("protocol: ContextFootprint is a v5 message, checked field by field") {
  auto f = zeroed<ContextFootprintMsg>();
  f.slot = 2;
  f.physical_free = 10ull << 30;
  f.in_use = 512 << 20;
  Message m;
  REQUIRE(dec(enc(f, 4), Receiver::kDaemon, &m));
  CHECK(m.type() == MsgType::kContextFootprint);
  CHECK(m.body.context_footprint.slot == 2);
  CHECK(m.body.context_footprint.physical_free == 10ull << 30);
  CHECK(m.body.context_footprint.in_use == 512 << 20);
  // Not at older versions: an encoder refuses, and a daemon refuses one that claims v4.
  std::vector<unsigned char> buf(kMaxMessage);
  CHECK(encode(f, 1, buf.data(), buf.size(), 4).status.error == Error::kBadVersion);
  auto b = enc(f, 4);
  reinterpret_cast<Header*>(b.data())->version = 4;
  CHECK(daemon_error(b) == Error::kBadType);
  // A client never receives it.
  CHECK(dec(enc(f, 4), Receiver::kClient, &m).error == Error::kBadType);
  // Field checks.
  auto bad = f;
  bad.slot = kMaxDevices;
  CHECK(encode(bad, 1, buf.data(), buf.size()).status.error == Error::kBadValue);
  bad = f;
  bad.physical_free = kUnknown;
  CHECK(encode(bad, 1, buf.data(), buf.size()).status.error == Error::kBadValue);
  bad = f;
  bad.in_use = kUnknown;
  CHECK(encode(bad, 1, buf.data(), buf.size()).status.error == Error::kBadValue);
  bad = f;
  bad.reserved0 = 1;
  CHECK(encode(bad, 1, buf.data(), buf.size()).status.error == Error::kReserved);
  auto raw = enc(f, 4);
  raw.push_back(0);
  reinterpret_cast<Header*>(raw.data())->size = uint32_t(raw.size());
  CHECK(daemon_error(raw) == Error::kTooLong);
}

TEST_CASE("protocol: every other message round-trips") {
  Message m;
  {
    auto a = zeroed<AttachMsg>();
    a.n_devices = 2;
    a.devices[0].device = device(1, 80ull << 30, 70ull << 30);
    a.devices[0].request = 600 << 20;
    a.devices[1].device = device(2);
    REQUIRE(dec(enc(a), Receiver::kDaemon, &m));
    CHECK(m.body.attach.n_devices == 2);
    CHECK(m.body.attach.devices[0].request == 600 << 20);
    CHECK(m.body.attach.devices[0].device.physical_free == 70ull << 30);
  }
  {
    auto g = zeroed<GrowMsg>();
    g.slot = 3;
    g.need = 1 << 30;
    g.in_use = 1 << 29;
    g.physical_free = kUnknown;
    REQUIRE(dec(enc(g, 99), Receiver::kDaemon, &m));
    CHECK(m.type() == MsgType::kGrow);
    CHECK(m.h.seq == 99);
    CHECK(m.body.grow.slot == 3);
    CHECK(m.body.grow.need == 1 << 30);
  }
  {
    auto s = zeroed<ShrinkMsg>();
    s.slot = 1;
    s.grant = 64 << 20;
    REQUIRE(dec(enc(s), Receiver::kDaemon, &m));
    CHECK(m.body.shrink.grant == 64 << 20);
  }
  {
    auto o = zeroed<DriverOomMsg>();
    o.request = 5;
    o.physical_free = 3;
    REQUIRE(dec(enc(o), Receiver::kDaemon, &m));
    CHECK(m.body.driver_oom.physical_free == 3);
  }
  {
    auto c = zeroed<CancelMsg>();
    c.target_seq = 12;
    c.why = uint32_t(CancelWhy::kSignal);
    REQUIRE(dec(enc(c), Receiver::kDaemon, &m));
    CHECK(m.body.cancel.target_seq == 12);
  }
  {
    auto g = zeroed<GoodbyeMsg>();
    g.exit_status = 3;
    g.has_status = 1;
    REQUIRE(dec(enc(g), Receiver::kDaemon, &m));
    CHECK(m.body.goodbye.exit_status == 3);
  }
  {
    auto a = zeroed<AdminMsg>();
    a.op = uint32_t(AdminOp::kSet);
    a.set_fields = kSetMem | kSetPriority;
    a.mem = 1 << 30;
    a.priority = uint8_t(Priority::kBestEffort);
    set_string(a.job, "1000:train");
    REQUIRE(dec(enc(a), Receiver::kDaemon, &m));
    CHECK(m.body.admin.mem == 1 << 30);
    CHECK(std::string(m.body.admin.job) == "1000:train");
  }
  {
    auto r = zeroed<RegisterReplyMsg>();
    r.epoch = 77;
    r.limit = kNoLimit;
    r.grant_step = 64 << 20;
    r.daemon_version = kVersion;
    set_string(r.job, "x-1");
    REQUIRE(dec(enc(r), Receiver::kClient, &m));
    CHECK(m.body.register_reply.epoch == 77);
  }
  {
    auto r = zeroed<AttachReplyMsg>();
    r.outcome = uint32_t(Outcome::kGranted);
    r.n_devices = 1;
    r.devices[0].slot = 4;
    r.devices[0].grant = 128 << 20;
    r.waited_ns = 10;
    REQUIRE(dec(enc(r), Receiver::kClient, &m));
    CHECK(m.body.attach_reply.devices[0].slot == 4);
  }
  {
    auto r = zeroed<GrowReplyMsg>();
    r.outcome = uint32_t(Outcome::kRefused);
    r.reason = uint32_t(Reason::kDeadlockBroken);
    r.limit = kNoLimit;
    REQUIRE(dec(enc(r), Receiver::kClient, &m));
    CHECK(Reason(m.body.grow_reply.reason) == Reason::kDeadlockBroken);
  }
  {
    auto e = zeroed<ErrorMsg>();
    e.code = uint32_t(ErrorCode::kVersion);
    e.min_version = 1;
    e.max_version = 2;
    set_string(e.text, "protocol version 3 is not supported");
    REQUIRE(dec(enc(e), Receiver::kClient, &m));
    CHECK(std::string(m.body.error.text) == "protocol version 3 is not supported");
  }
}

TEST_CASE("protocol: admin replies carry a payload in chunks") {
  std::vector<unsigned char> buf(kMaxMessage);
  auto r = zeroed<AdminReplyMsg>();
  r.status = uint32_t(AdminStatus::kOk);
  r.flags = kAdminMore;
  std::string text = "{\"devices\":[]}";
  Encoded e = encode_admin_reply(r, text.data(), text.size(), 3, buf.data(), buf.size());
  REQUIRE(e.status);
  Message m;
  REQUIRE(decode(buf.data(), e.size, Receiver::kClient, &m));
  CHECK(std::string(m.payload, m.payload_len) == text);
  CHECK(m.body.admin_reply.flags == kAdminMore);
  // A length that disagrees with the datagram is refused.
  CHECK(decode(buf.data(), e.size - 1, Receiver::kClient, &m).error == Error::kSizeMismatch);
  std::string big(kAdminChunk + 1, 'x');
  CHECK(encode_admin_reply(r, big.data(), big.size(), 3, buf.data(), buf.size()).status.error == Error::kBadValue);
}

TEST_CASE("protocol: malformed messages are refused with a reason") {
  auto g = zeroed<GrowMsg>();
  g.need = 1;
  auto good = enc(g);
  Message m;

  SUBCASE("too short for a header") { CHECK(decode(good.data(), 8, Receiver::kDaemon, &m).error == Error::kShort); }
  SUBCASE("empty") { CHECK(decode(good.data(), 0, Receiver::kDaemon, &m).error == Error::kShort); }
  SUBCASE("bad magic") {
    good[0] ^= 1;
    CHECK(daemon_error(good) == Error::kBadMagic);
  }
  SUBCASE("size field lies") {
    reinterpret_cast<Header*>(good.data())->size += 1;
    CHECK(daemon_error(good) == Error::kSizeMismatch);
  }
  SUBCASE("truncated body") {
    good.resize(good.size() - 8);
    reinterpret_cast<Header*>(good.data())->size -= 8;
    CHECK(daemon_error(good) == Error::kShort);
  }
  SUBCASE("oversized body") {
    good.resize(good.size() + 8, 0);
    reinterpret_cast<Header*>(good.data())->size += 8;
    CHECK(daemon_error(good) == Error::kTooLong);
  }
  SUBCASE("larger than any message") {
    std::vector<unsigned char> huge(kMaxMessage + 1, 0);
    CHECK(decode(huge.data(), huge.size(), Receiver::kDaemon, &m).error == Error::kTooLong);
  }
  SUBCASE("future and ancient versions") {
    reinterpret_cast<Header*>(good.data())->version = kVersion + 1;
    CHECK(daemon_error(good) == Error::kBadVersion);
    reinterpret_cast<Header*>(good.data())->version = 0;
    CHECK(daemon_error(good) == Error::kBadVersion);
    // ... but the header is still read, so the daemon can name the version it refuses.
    Header h;
    CHECK(decode_header(good.data(), good.size(), &h).error == Error::kBadVersion);
    CHECK(h.version == 0);
  }
  SUBCASE("unknown type, and a reply sent to the daemon") {
    reinterpret_cast<Header*>(good.data())->type = 77;
    CHECK(daemon_error(good) == Error::kBadType);
    auto r = zeroed<GrowReplyMsg>();
    r.outcome = uint32_t(Outcome::kGranted);
    r.limit = 1;
    CHECK(daemon_error(enc(r)) == Error::kBadType);
    CHECK(dec(enc(g), Receiver::kClient, &m).error == Error::kBadType);
  }
  SUBCASE("reserved field not zero") {
    reinterpret_cast<GrowMsg*>(good.data())->reserved0 = 1;
    CHECK(daemon_error(good) == Error::kReserved);
  }
  SUBCASE("slot out of range") {
    reinterpret_cast<GrowMsg*>(good.data())->slot = kMaxDevices;
    CHECK(daemon_error(good) == Error::kBadValue);
  }
  SUBCASE("zero need") {
    reinterpret_cast<GrowMsg*>(good.data())->need = 0;
    CHECK(daemon_error(good) == Error::kBadValue);
  }
}

TEST_CASE("protocol: string, enum and count checks") {
  auto reg = enc(make_register());
  auto* r = reinterpret_cast<RegisterMsg*>(reg.data());
  SUBCASE("job id without a terminator") {
    std::memset(r->job, 'a', sizeof r->job);
    CHECK(daemon_error(reg) == Error::kBadString);
  }
  SUBCASE("bytes after the terminator") {
    r->job[sizeof r->job - 1] = 'x';
    CHECK(daemon_error(reg) == Error::kBadString);
  }
  SUBCASE("a slash in a job id") {
    r->job[0] = '/';
    CHECK(daemon_error(reg) == Error::kBadString);
  }
  SUBCASE("a control character in the command line") {
    r->cmdline[3] = '\n';
    CHECK(daemon_error(reg) == Error::kBadString);
  }
  SUBCASE("priority out of range") {
    r->priority = 3;
    CHECK(daemon_error(reg) == Error::kBadEnum);
  }
  SUBCASE("on_full out of range") {
    r->on_full = 2;
    CHECK(daemon_error(reg) == Error::kBadEnum);
  }
  SUBCASE("unknown flag") {
    r->flags = 0x80;
    CHECK(daemon_error(reg) == Error::kReserved);
  }
  SUBCASE("zero limit") {
    r->limit = 0;
    CHECK(daemon_error(reg) == Error::kBadValue);
  }
  SUBCASE("garbage in an unused ledger entry") {
    r->ledger[5].in_use = 1;
    CHECK(daemon_error(reg) == Error::kReserved);
  }

  auto a = zeroed<AttachMsg>();
  a.n_devices = 1;
  a.devices[0].device = device(1, 10, 5);
  auto att = enc(a);
  auto* am = reinterpret_cast<AttachMsg*>(att.data());
  SUBCASE("no devices") {
    am->n_devices = 0;
    CHECK(daemon_error(att) == Error::kBadCount);
  }
  SUBCASE("too many devices") {
    am->n_devices = kMaxDevices + 1;
    CHECK(daemon_error(att) == Error::kBadCount);
  }
  SUBCASE("a zero uuid") {
    std::memset(am->devices[0].device.uuid, 0, 16);
    CHECK(daemon_error(att) == Error::kBadValue);
  }
  SUBCASE("more free than capacity") {
    am->devices[0].device.physical_free = 11;
    CHECK(daemon_error(att) == Error::kBadValue);
  }
  SUBCASE("zero capacity") {
    am->devices[0].device.capacity = 0;
    CHECK(daemon_error(att) == Error::kBadValue);
  }
  SUBCASE("request larger than the device") {
    am->devices[0].request = 11;
    CHECK(daemon_error(att) == Error::kBadValue);
  }
}

TEST_CASE("protocol: admin requests are checked field by field") {
  auto a = zeroed<AdminMsg>();
  a.op = uint32_t(AdminOp::kStatus);
  CHECK(daemon_error(enc(a)) == Error::kNone);
  std::vector<unsigned char> buf(kMaxMessage);
  auto bad = [&](AdminMsg x) { return encode(x, 1, buf.data(), buf.size()).status.error; };
  AdminMsg x = a;
  set_string(x.job, "j");
  CHECK(bad(x) == Error::kBadString);  // status takes no job
  x = a;
  x.op = uint32_t(AdminOp::kSet);
  set_string(x.job, "j");
  CHECK(bad(x) == Error::kBadValue);  // set with nothing to set
  x.set_fields = kSetMem;
  CHECK(bad(x) == Error::kBadValue);  // ... and a zero size
  x.mem = 1;
  CHECK(bad(x) == Error::kNone);
  x.set_fields = kSetPriority;
  CHECK(bad(x) == Error::kBadValue);  // mem given without kSetMem
  x.mem = 0;
  x.priority = 7;
  CHECK(bad(x) == Error::kBadEnum);
  x = a;
  x.op = uint32_t(AdminOp::kReport);
  CHECK(bad(x) == Error::kBadString);  // report needs a job
  x.op = last_admin_op(kVersion) + 1;
  CHECK(bad(x) == Error::kBadEnum);
}

TEST_CASE("protocol: a client reads the daemon's refusal at any version") {
  auto e = zeroed<ErrorMsg>();
  e.code = uint32_t(ErrorCode::kVersion);
  set_string(e.text, "colocd speaks protocol 1..2");
  auto b = enc(e);
  reinterpret_cast<Header*>(b.data())->version = kVersion + 5;  // a far newer daemon
  Message m;
  REQUIRE(dec(b, Receiver::kClient, &m));
  CHECK(m.h.version == kVersion + 5);
  CHECK(std::string(m.body.error.text) == "colocd speaks protocol 1..2");
}

TEST_CASE("protocol: helpers") {
  char job[kJobIdSize];
  CHECK(set_string(job, "short"));
  CHECK(std::string(job) == "short");
  std::string longer(100, 'j');
  CHECK_FALSE(set_string(job, longer.c_str()));
  CHECK(std::strlen(job) == kJobIdSize - 1);
  CHECK(valid_job_id(""));
  CHECK(valid_job_id("train-a1b2c3"));
  CHECK_FALSE(valid_job_id("a b"));
  CHECK_FALSE(valid_job_id("../x"));
  CHECK_FALSE(valid_job_id(longer.c_str()));
  Priority p;
  CHECK(parse_priority("best-effort", &p));
  CHECK(p == Priority::kBestEffort);
  CHECK_FALSE(parse_priority("urgent", &p));
  CHECK(std::string(reason_name(Reason::kOwnLimit)) == "own-limit");
  CHECK(std::string(type_name(999)) == "?");
}

TEST_CASE("wire: the command line's text is printable, truncated, and its hash covers all of it") {
  std::string raw("python\0train.py\0--name\0a\tb\0", 27);
  coloc::wire::Cmdline c;
  coloc::wire::describe_cmdline(raw.data(), raw.size(), &c);
  CHECK(std::string(c.text) == "python train.py --name a?b");
  coloc::wire::Cmdline c2;
  std::string raw2 = raw;
  raw2[0] = 'P';
  coloc::wire::describe_cmdline(raw2.data(), raw2.size(), &c2);
  CHECK(c.hash != c2.hash);
  std::string huge(1000, 'x');
  huge += std::string("\xc3\xa9", 2);  // a multi-byte character right at the cut
  coloc::wire::describe_cmdline(huge.data(), huge.size(), &c);
  std::string t = c.text;
  CHECK(t.size() <= kCmdlineSize - 1);
  CHECK(t.substr(t.size() - 3) == "...");
  // The text is valid for the protocol.
  auto r = make_register();
  std::memcpy(r.cmdline, c.text, sizeof r.cmdline);
  std::vector<unsigned char> buf(kMaxMessage);
  CHECK(encode(r, 1, buf.data(), buf.size()).status);
  coloc::wire::Cmdline self;
  CHECK(coloc::wire::read_cmdline(&self) == 0);
  CHECK(std::string(self.text).rfind(program_invocation_name, 0) == 0);  // starts with argv[0]
}

}  // TEST_SUITE

TEST_CASE("protocol: pause and resume are v6 admin ops: an older peer neither sends nor accepts them") {
  auto a = zeroed<AdminMsg>();
  a.op = uint32_t(AdminOp::kPause);
  set_string(a.job, "train");
  Message m;
  auto b = enc(a);  // v6
  REQUIRE(dec(b, Receiver::kDaemon, &m));
  CHECK(m.body.admin.op == uint32_t(AdminOp::kPause));
  // Encoding it for a v5 daemon is refused (the CLI sends it as v6, which an older daemon refuses).
  std::vector<unsigned char> buf(kMaxMessage);
  CHECK(encode(a, 1, buf.data(), buf.size(), 5).status.error == Error::kBadVersion);
  // The same bytes labelled v5 are malformed.
  reinterpret_cast<Header*>(b.data())->version = 5;
  CHECK(dec(b, Receiver::kDaemon, &m).error == Error::kBadEnum);
  a.op = uint32_t(AdminOp::kResume);
  CHECK(daemon_error(enc(a)) == Error::kNone);
  a.job[0] = '\0';
  std::vector<unsigned char> out(kMaxMessage);
  CHECK(encode(a, 1, out.data(), out.size(), kVersion).status.error == Error::kBadString);  // needs a job
  a.op = last_admin_op(kVersion) + 1;
  CHECK(encode(a, 1, out.data(), out.size(), kVersion).status.error == Error::kBadEnum);
  // Status still goes at v2 (what the CLI sends, so an old daemon answers it).
  auto s = zeroed<AdminMsg>();
  s.op = uint32_t(AdminOp::kStatus);
  CHECK(daemon_error(enc(s, 1, 2)) == Error::kNone);
}

TEST_SUITE("daemon") {
TEST_CASE("protocol: v7 admin fields: a policy and a weight round-trip; an older peer neither sends nor accepts them") {
  std::vector<unsigned char> out(kMaxMessage);
  auto status_of = [&](const AdminMsg& x, uint16_t version = kVersion) {
    return encode(x, 1, out.data(), out.size(), version).status.error;
  };
  // kPolicy: the device in `job`, the mode, the quantum.
  auto p = zeroed<AdminMsg>();
  p.op = uint32_t(AdminOp::kPolicy);
  p.mode = uint8_t(PolicyMode::kTimeslice);
  p.quantum_ms = 250;
  set_string(p.job, "GPU-0ceeb82b");
  Message m;
  REQUIRE(dec(enc(p), Receiver::kDaemon, &m));
  CHECK(m.h.version == kVersion);
  CHECK(m.body.admin.op == uint32_t(AdminOp::kPolicy));
  CHECK(m.body.admin.mode == uint8_t(PolicyMode::kTimeslice));
  CHECK(m.body.admin.quantum_ms == 250);
  CHECK(std::string(m.body.admin.job) == "GPU-0ceeb82b");
  // The quantum: 0 (the default) or kMinQuantumMs..kMaxQuantumMs, for timeslice only.
  AdminMsg x = p;
  x.quantum_ms = 0;
  CHECK(status_of(x) == Error::kNone);
  x.quantum_ms = kMaxQuantumMs;
  CHECK(status_of(x) == Error::kNone);
  x.quantum_ms = kMaxQuantumMs + 1;
  CHECK(status_of(x) == Error::kBadValue);
  x = p;
  x.mode = uint8_t(PolicyMode::kShare);
  CHECK(status_of(x) == Error::kBadValue);  // share has no quantum
  x.quantum_ms = 0;
  CHECK(status_of(x) == Error::kNone);
  x.mode = uint8_t(PolicyMode::kPriority);
  CHECK(status_of(x) == Error::kNone);  // (its target is v8: protocol_v8_test.cpp)
  x.mode = 3;
  CHECK(status_of(x) == Error::kBadEnum);
  x = p;
  x.job[0] = '\0';
  CHECK(status_of(x) == Error::kBadString);  // needs a device
  x = p;
  x.job[kJobIdSize - 1] = 'x';  // no terminator
  CHECK(status_of(x) == Error::kBadString);
  x = p;
  set_string(x.job, "GPU 0");  // a space
  CHECK(status_of(x) == Error::kBadString);
  x = p;
  x.weight = 2;
  CHECK(status_of(x) == Error::kReserved);  // a policy sets no job field
  x = p;
  x.target_pct = 1;  // (v8) a target is the priority policy's
  CHECK(status_of(x) == Error::kBadValue);

  // kSet with kSetWeight: 1..100, and only with the bit.
  auto w = zeroed<AdminMsg>();
  w.op = uint32_t(AdminOp::kSet);
  w.set_fields = kSetWeight;
  w.weight = 3;
  set_string(w.job, "train");
  REQUIRE(dec(enc(w), Receiver::kDaemon, &m));
  CHECK(m.body.admin.weight == 3);
  CHECK(m.body.admin.set_fields == kSetWeight);
  x = w;
  x.weight = 0;
  CHECK(status_of(x) == Error::kBadValue);
  x.weight = kMaxWeight;
  CHECK(status_of(x) == Error::kNone);
  x.weight = kMaxWeight + 1;
  CHECK(status_of(x) == Error::kBadValue);
  x = w;
  x.set_fields = kSetPriority;  // a weight without its bit
  CHECK(status_of(x) == Error::kBadValue);
  x.set_fields = kSetPriority | kSetWeight | kSetMem;
  x.mem = 1;
  CHECK(status_of(x) == Error::kNone);
  x.set_fields = 1u << 3;  // an unknown bit
  CHECK(status_of(x) == Error::kBadValue);
  x = w;
  x.mode = 1;  // a policy field on a set
  CHECK(status_of(x) == Error::kReserved);
  x = w;
  x.quantum_ms = 100;
  CHECK(status_of(x) == Error::kReserved);
  // Other ops carry no weight.
  auto s = zeroed<AdminMsg>();
  s.op = uint32_t(AdminOp::kStatus);
  s.weight = 1;
  CHECK(status_of(s) == Error::kReserved);

  // Below v7: never encoded; the same bytes labelled v6 are malformed.
  CHECK(status_of(p, 6) == Error::kBadVersion);
  CHECK(status_of(w, 6) == Error::kBadVersion);
  auto b = enc(p);
  reinterpret_cast<Header*>(b.data())->version = 6;
  CHECK(dec(b, Receiver::kDaemon, &m).error == Error::kBadEnum);
  b = enc(w);
  reinterpret_cast<Header*>(b.data())->version = 6;
  CHECK(dec(b, Receiver::kDaemon, &m).error == Error::kReserved);  // a v6 Admin with a non-zero weight byte
  // A v6 set of the priority alone is fine, as before.
  auto v6 = zeroed<AdminMsg>();
  v6.op = uint32_t(AdminOp::kSet);
  v6.set_fields = kSetPriority;
  set_string(v6.job, "train");
  CHECK(daemon_error(enc(v6, 1, 6)) == Error::kNone);
  // The layout did not move: the job name is where it always was.
  static_assert(offsetof(AdminMsg, weight) == offsetof(AdminMsg, priority) + 1);
  static_assert(offsetof(AdminMsg, quantum_ms) % 4 == 0);
  static_assert(sizeof(AdminMsg) == sizeof(Header) + 24 + kJobIdSize);
}
}  // TEST_SUITE
