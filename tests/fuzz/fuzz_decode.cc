// libFuzzer target for the protocol decoder: Decode must never crash, hang or throw,
// and whatever it accepts must re-encode to a frame that decodes to the same message.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "aryl/protocol/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view frame(reinterpret_cast<const char*>(data), size);
  auto msg = aryl::protocol::Decode(frame);
  if (!msg.ok()) {
    if (msg.status().message().empty()) std::abort();  // errors always say why
    return 0;
  }
  std::string again = aryl::protocol::Encode(*msg);
  auto back = aryl::protocol::Decode(again);
  if (!back.ok()) std::abort();
  if (aryl::protocol::Encode(*back) != again) std::abort();
  return 0;
}
