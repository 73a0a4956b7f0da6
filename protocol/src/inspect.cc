// Message-level checks of the inspection messages (inspect.h).
#include "aryl/protocol/messages.h"

namespace aryl::protocol {

bool IsEventKind(std::string_view kind) {
  for (auto k : kEventKinds)
    if (k == kind) return true;
  return false;
}

bool IsLogStream(std::string_view s) { return s == "stdout" || s == "stderr"; }

namespace {
Status CheckStream(const std::string& stream) {
  if (IsLogStream(stream)) return Status::Ok();
  return Status::InvalidArgument("field 'stream': expected stdout or stderr, got \"" + stream + "\"");
}
}  // namespace

Status ListEvents::Validate() const {
  if (kind.empty() || IsEventKind(kind)) return Status::Ok();
  std::string known;
  for (auto k : kEventKinds) known += (known.empty() ? "" : ", ") + std::string(k);
  return Status::InvalidArgument("field 'kind': unknown event kind \"" + kind + "\" (known: " + known + ")");
}

Status JobLogs::Validate() const { return CheckStream(stream); }
Status LogRead::Validate() const { return CheckStream(stream); }

}  // namespace aryl::protocol
