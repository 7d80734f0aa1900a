// libFuzzer target for the protocol decoder (include/coloc/protocol.h), the code that reads
// every byte a client sends to colocd. Besides not crashing (ASan/UBSan), it checks that
// decoding is canonical: whatever decodes re-encodes to exactly the bytes it came from.
//   make fuzz                      runs it for FUZZ_SECONDS on tests/fuzz/corpus/protocol_fuzz/
#include <cstdint>
#include <cstring>
#include <vector>

#include "coloc/protocol.h"

using namespace coloc::proto;

namespace {

template <class T>
void same_bytes(const T& body, const Header& h, const uint8_t* data, size_t size) {
  std::vector<unsigned char> buf(kMaxMessage);
  Encoded e = encode(body, h.seq, buf.data(), buf.size(), h.version);
  if (!e.status || e.size != size || std::memcmp(buf.data(), data, size) != 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Header h;
  (void)decode_header(data, size, &h);
  for (Receiver who : {Receiver::kDaemon, Receiver::kClient}) {
    Message m;
    if (!decode(data, size, who, &m)) continue;
    if (m.h.version < kMinVersion || m.h.version > kVersion) continue;  // an Error from another version
    switch (m.type()) {
      case MsgType::kRegister: same_bytes(m.body.reg, m.h, data, size); break;
      case MsgType::kAttach: same_bytes(m.body.attach, m.h, data, size); break;
      case MsgType::kGrow: same_bytes(m.body.grow, m.h, data, size); break;
      case MsgType::kShrink: same_bytes(m.body.shrink, m.h, data, size); break;
      case MsgType::kDriverOom: same_bytes(m.body.driver_oom, m.h, data, size); break;
      case MsgType::kCancel: same_bytes(m.body.cancel, m.h, data, size); break;
      case MsgType::kGoodbye: same_bytes(m.body.goodbye, m.h, data, size); break;
      case MsgType::kAdmin: same_bytes(m.body.admin, m.h, data, size); break;
      case MsgType::kRegisterReply: same_bytes(m.body.register_reply, m.h, data, size); break;
      case MsgType::kAttachReply: same_bytes(m.body.attach_reply, m.h, data, size); break;
      case MsgType::kGrowReply: same_bytes(m.body.grow_reply, m.h, data, size); break;
      case MsgType::kError: same_bytes(m.body.error, m.h, data, size); break;
      case MsgType::kAdminReply: {
        std::vector<unsigned char> buf(kMaxMessage);
        Encoded e = encode_admin_reply(m.body.admin_reply, m.payload, m.payload_len, m.h.seq, buf.data(), buf.size(), m.h.version);
        if (!e.status || e.size != size || std::memcmp(buf.data(), data, size) != 0) __builtin_trap();
        break;
      }
    }
  }
  return 0;
}
