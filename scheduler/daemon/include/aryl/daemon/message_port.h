// MessagePort: the daemon's side of the network, as narrow as the daemon uses
// it. The binary's port is a protocol::Server (ZeroMQ ROUTER, its own thread);
// a test or a simulation gives the daemon an in-memory port and drives it
// itself (Daemon::StartDriven): it delivers each message with
// Daemon::Deliver, calls Daemon::Tick on its own clock, and collects what the
// daemon replies and pushes from the port, all on one thread and in one order.
//
// Contract (the same for every implementation):
//  1. Reply(to, msg) answers a request received earlier (ReplyTo kept by the
//     daemon); a one-way message's ReplyTo has no correlation and the reply
//     goes nowhere.
//  2. Push(identity, msg) sends to the client whose routing id is `identity`
//     (an agent: its id); an unknown peer is Unavailable, never a crash.
//  3. drained(): every message sent to the daemon before this moment has been
//     delivered. The agent liveness check counts time only up to such
//     moments, so a backlog never reads as a silent agent.
//  4. rejected(): frames the port could not decode, counted as bad requests.
// Thread safety: called from the daemon's thread only (the ZeroMQ port also
// accepts Push and Reply from other threads).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "aryl/status.h"

namespace aryl::daemon {

class MessagePort {
 public:
  virtual ~MessagePort() = default;
  // Where peers reach the daemon (the bound endpoint, port resolved). Also
  // salts the daemon's worker ids, so two schedulers never share one.
  virtual const std::string& endpoint() const = 0;
  virtual Status Reply(const protocol::ReplyTo& to, const protocol::Message& msg) = 0;
  virtual Status Push(std::string_view identity, const protocol::Message& msg) = 0;
  virtual bool drained() const = 0;
  virtual std::uint64_t rejected() const = 0;
};

}  // namespace aryl::daemon
