// libFuzzer target for the protocol decoder (include/coloc/protocol.h), the code that reads
// every byte a client sends to colocd. Besides not crashing (ASan/UBSan), it checks that
// decoding is canonical: whatever decodes re-encodes to exactly the bytes it came from.
//   make fuzz                      runs it for FUZZ_SECONDS on tests/fuzz/corpus/protocol_fuzz/
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "coloc/protocol.h"

using namespace coloc::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Header h;
  (void)decode_header(data, size, &h);
  static unsigned char buf[kMaxMessage];
  for (Receiver who : {Receiver::kDaemon, Receiver::kClient}) {
    Message m;
    if (!decode(data, size, who, &m)) continue;
    if (m.h.version < kMinVersion || m.h.version > kVersion) continue;  // an Error from another version
    Encoded e = encode_message(m, buf, sizeof buf);
    if (!e.status || e.size != size || std::memcmp(buf, data, size) != 0) __builtin_trap();
  }
  return 0;
}
