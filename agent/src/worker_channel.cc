// The agent's end of the worker channel (worker_channel.h).
#include "worker_channel.h"

#include <filesystem>
#include <variant>

#include "agent_security.h"

namespace aryl::agent {

namespace p = aryl::protocol;
namespace fs = std::filesystem;

std::optional<p::Message> WorkerChannel::State::Refusal(const p::ReplyTo& from, const p::Message& m) const {
  const auto& uid = from.peer.uid;
  if (!uid || *uid == self_uid) return std::nullopt;
  std::optional<p::JobId> job;
  std::visit([&](const auto& x) {
    if constexpr (requires { x.job; }) job = x.job;
  }, m);
  auto it = issued.find(from.peer.identity);
  if (it != issued.end() && it->second.uid == *uid && (!job || *job == it->second.job)) return std::nullopt;
  return p::Error{Status::Code::kPermissionDenied,
                  "worker channel: uid " + std::to_string(*uid) + " does not run " +
                      (job ? "job " + std::to_string(*job) : std::string("that job")) +
                      " under this identity on this agent"};
}

std::optional<p::Message> WorkerChannel::State::Answer(const p::ReplyTo& from, p::Message m) {
  std::lock_guard<std::mutex> lock(mu);
  if (auto refused = Refusal(from, m)) return refused;
  if (auto* d = std::get_if<p::WorkerDone>(&m)) {
    // Answered here, once recorded, so the report cannot race the exit.
    Status v = d->Validate();
    if (!v.ok()) return p::Error::FromStatus(v);
    if (outcome.size() < 100000) outcome[from.peer.identity] = *d;
    return p::Ok{"recorded"};
  }
  if (auto* h = std::get_if<p::WorkerHello>(&m)) {
    hello.insert(from.peer.identity);
    auto it = announced.find({h->job, h->generation});
    if (it == announced.end()) {
      return p::Error{Status::Code::kNotFound, "job " + std::to_string(h->job) + ": generation " +
                                                   std::to_string(h->generation) + " unknown to this agent"};
    }
    return it->second;
  }
  if (inbox.size() < 10000) inbox.push_back(std::move(m));
  return std::nullopt;
}

Result<std::unique_ptr<WorkerChannel>> WorkerChannel::Start(const std::string& log_dir, const std::string& agent_id,
                                                            bool shared) {
  ARYL_ASSIGN_OR_RETURN(fs::path path, WorkerSocketPath(log_dir, agent_id, shared));
  std::error_code ec;
  fs::remove(path, ec);  // a socket file left by an agent that died
  p::Server::Options so;
  so.endpoint = "ipc://" + path.string();
  std::unique_ptr<WorkerChannel> channel(new WorkerChannel());
  std::shared_ptr<State> state = channel->state_;
  auto server = p::Server::Start(so, [state](const p::ReplyTo& from, p::Message m) {
    return state->Answer(from, std::move(m));
  });
  if (!server.ok()) return server.status().WithContext("worker channel " + so.endpoint);
  channel->server_ = std::move(*server);
  channel->endpoint_ = channel->server_->endpoint();
  channel->socket_path_ = path.string();
  // Workers of other accounts must reach the socket; who may say what is
  // checked per message (State::Refusal).
  if (shared) ARYL_RETURN_IF_ERROR(MakeSocketReachable(path));
  return channel;
}

WorkerChannel::~WorkerChannel() {
  if (!server_) return;
  server_->Close();
  server_->Join();
  std::error_code ec;
  fs::remove(socket_path_, ec);
  fs::remove(fs::path(socket_path_).parent_path(), ec);  // its private directory, if empty
}

void WorkerChannel::Remember(const p::GenerationAnnounce& a) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->announced[{a.job, a.generation}] = a;
}

void WorkerChannel::Issue(const std::string& identity, p::JobId job, uid_t uid) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->issued[identity] = {job, uid};
}

void WorkerChannel::Revoke(const std::string& identity) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->issued.erase(identity);
}

Status WorkerChannel::Push(const std::string& identity, const p::Message& m) { return server_->Push(identity, m); }

std::vector<p::Message> WorkerChannel::TakeInbox() {
  std::vector<p::Message> inbox;
  std::lock_guard<std::mutex> lock(state_->mu);
  inbox.swap(state_->inbox);
  return inbox;
}

bool WorkerChannel::SaidHello(const std::string& identity) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->hello.count(identity) > 0;
}

WorkerChannel::Ending WorkerChannel::TakeEnding(const std::string& identity) {
  Ending e;
  std::lock_guard<std::mutex> lock(state_->mu);
  e.runtime = state_->hello.erase(identity) > 0;
  state_->issued.erase(identity);
  auto it = state_->outcome.find(identity);
  if (it != state_->outcome.end()) {
    e.done = it->second;
    state_->outcome.erase(it);
  }
  return e;
}

void WorkerChannel::ForgetJob(p::JobId job) {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::erase_if(state_->announced, [job](const auto& kv) { return kv.first.first == job; });
  std::erase_if(state_->issued, [job](const auto& kv) { return kv.second.job == job; });
}

}  // namespace aryl::agent
