// WorkerChannel: the agent's end of the worker channel (protocol/messages.h
// steps 12-16; agent.h, "Worker channel"). A ROUTER on an ipc:// endpoint in
// the log directory (ARYL_AGENT_ENDPOINT) that the runtime's AgentChannel of
// each worker connects to:
//  1. WorkerHello is answered on the channel's thread with the
//     GenerationAnnounce the worker was started for (Remember), or NotFound.
//  2. WorkerDone is validated, recorded by the sender's identity and answered
//     there, so the report cannot race the worker's exit (TakeEnding).
//  3. Every other message is queued for the agent's loop (TakeInbox).
//  4. A peer of another uid than the agent's own (SO_PEERCRED; --run-as
//     workers) is heard only under an identity issued to that uid (Issue),
//     about that identity's job: it can neither speak for another account's
//     worker nor take its pushes by guessing its identity. Peers of the
//     agent's own uid are not checked: they could ptrace the agent anyway.
//
// Thread safety: the server thread and the agent's loop share State under its
// mutex; every method may be called from any thread. The destructor closes
// the server, joins its thread and removes the socket and its directory.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"
#include "aryl/result.h"

namespace aryl::agent {

class WorkerChannel {
 public:
  // What the channel knows, shared by its thread and the agent's loop.
  struct State {
    std::mutex mu;
    // By (job, store generation): what a WorkerHello for it is answered with.
    std::map<std::pair<protocol::JobId, std::int64_t>, protocol::GenerationAnnounce> announced;
    std::vector<protocol::Message> inbox;
    // By channel identity: workers that said WorkerHello (they link the
    // runtime) and the WorkerDone each reported before exiting (its outcome
    // and the step it ended at).
    std::set<std::string> hello;
    std::map<std::string, protocol::WorkerDone> outcome;
    // The identity each worker was told to connect with (ARYL_CHANNEL_ID:
    // "worker-<job>-<worker>-<128 random bits>", unguessable), the job it was
    // started for and the account it runs as.
    struct Issued {
      protocol::JobId job = 0;
      uid_t uid = 0;
    };
    uid_t self_uid = ::geteuid();
    std::map<std::string, Issued> issued;

    // Why a message from `from` is not heard (step 4); nullopt: it is. Holds mu.
    std::optional<protocol::Message> Refusal(const protocol::ReplyTo& from, const protocol::Message& m) const;
    // The server's handler (steps 1-4): takes mu.
    std::optional<protocol::Message> Answer(const protocol::ReplyTo& from, protocol::Message m);
  };

  // How a worker's channel ended: whether it said WorkerHello, and its WorkerDone.
  struct Ending {
    bool runtime = false;
    std::optional<protocol::WorkerDone> done;
  };

  // Binds the channel's socket (WorkerSocketPath, agent_security.h): reachable
  // by every local account when `shared` (workers may run as others).
  static Result<std::unique_ptr<WorkerChannel>> Start(const std::string& log_dir, const std::string& agent_id,
                                                      bool shared);
  ~WorkerChannel();
  WorkerChannel(const WorkerChannel&) = delete;
  WorkerChannel& operator=(const WorkerChannel&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  uid_t self_uid() const { return state_->self_uid; }

  // Workers started for `a.generation` ask for it in their WorkerHello.
  void Remember(const protocol::GenerationAnnounce& a);
  // `identity` may speak for `job` as `uid` (step 4); Revoke takes it back.
  void Issue(const std::string& identity, protocol::JobId job, uid_t uid);
  void Revoke(const std::string& identity);
  // Sends `m` to the worker connected as `identity`.
  Status Push(const std::string& identity, const protocol::Message& m);
  // The messages queued for the loop since the last call (step 3).
  std::vector<protocol::Message> TakeInbox();
  bool SaidHello(const std::string& identity) const;
  // The end of the worker connected as `identity`: forgets its hello, issue and outcome.
  Ending TakeEnding(const std::string& identity);
  // Forgets a job's announcements and issued identities.
  void ForgetJob(protocol::JobId job);

 private:
  WorkerChannel() = default;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::unique_ptr<protocol::Server> server_;
  std::string endpoint_;
  std::string socket_path_;
};

}  // namespace aryl::agent
