#include "outbox.h"

namespace aryl::daemon {

Status Outbox::Run(StateStore& store, const std::function<Status()>& body) {
  if (depth_ > 0) return body();  // part of the enclosing one (4)
  ++depth_;
  held_.clear();
  Status st = store.Batch(body);
  --depth_;
  auto out = std::move(held_);
  held_.clear();
  if (st.ok())
    for (const auto& [identity, msg] : out) deliver_(identity, msg);
  return st;
}

void Outbox::Send(const std::string& identity, const protocol::Message& msg) {
  if (depth_ > 0)
    held_.emplace_back(identity, msg);
  else
    deliver_(identity, msg);
}

}  // namespace aryl::daemon
