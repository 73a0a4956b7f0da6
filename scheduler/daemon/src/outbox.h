// Outbox: the daemon's durable step (Daemon::Impl::Transaction) and the
// messages it holds back until that step's store writes are committed, so
// that no agent or client hears of a change the store does not hold.
//   1. Run(store, body): body's store writes go into one StateStore::Batch;
//      what it Sends meanwhile is held.
//   2. The batch commits: the held messages are delivered, in the order sent.
//   3. It fails (a full disk, an I/O error, body's own error): none of it
//      happened; the held messages are dropped. (The daemon then reloads its
//      memory from the store.)
//   4. A Run within a Run is part of the outer one: its body runs at once,
//      and the outer one's outcome decides for both.
//   5. Outside a Run, Send delivers at once.
// Delivery (the network: the route of an agent, the term on a command) is
// the function the daemon passes in (Daemon::Impl::SendNow over its
// MessagePort).
//
// Thread safety: none; the daemon's serving thread owns it.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "aryl/daemon/state_store.h"
#include "aryl/protocol/messages.h"
#include "aryl/status.h"

namespace aryl::daemon {

class Outbox {
 public:
  using Deliver = std::function<void(const std::string& identity, const protocol::Message& msg)>;
  explicit Outbox(Deliver deliver) : deliver_(std::move(deliver)) {}

  Status Run(StateStore& store, const std::function<Status()>& body);
  void Send(const std::string& identity, const protocol::Message& msg);
  bool open() const { return depth_ > 0; }  // within a Run
  std::size_t held() const { return held_.size(); }

 private:
  Deliver deliver_;
  int depth_ = 0;
  std::vector<std::pair<std::string, protocol::Message>> held_;
};

}  // namespace aryl::daemon
