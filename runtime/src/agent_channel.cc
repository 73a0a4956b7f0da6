#include "agent_channel.h"

#include <unistd.h>

#include <charconv>
#include <system_error>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"

namespace aryl {
namespace {

constexpr std::chrono::milliseconds kSendTimeout{200};

GenerationRecord ToRecord(const protocol::GenerationAnnounce& a) {
  GenerationRecord r;
  r.generation = a.generation;
  r.prev = -1;  // the agent's announcements do not say; the state sync does not need it
  for (auto id : a.members) r.members.push_back(std::to_string(id));
  return r;
}

}  // namespace

AgentChannel::~AgentChannel() = default;

Result<std::unique_ptr<AgentChannel>> AgentChannel::Connect(const std::string& endpoint, const std::string& job_id,
                                                            const std::string& worker_id,
                                                            const std::string& channel_id) {
  auto ch = std::unique_ptr<AgentChannel>(new AgentChannel());
  // ARYL_JOB_ID is "<job>" or, from the agent, "<job>-<start>": the protocol's job id
  // is the leading number. ARYL_WORKER_ID is a number.
  auto parse = [](const std::string& text, bool allow_suffix, auto* out) {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, *out);
    return ec == std::errc() && ptr != text.data() && (ptr == end || (allow_suffix && *ptr == '-'));
  };
  if (!parse(job_id, true, &ch->job_) || !parse(worker_id, false, &ch->worker_)) {
    return Status::InvalidArgument("with ARYL_AGENT_ENDPOINT, ARYL_JOB_ID ('" + job_id +
                                   "') must be <number> or <number>-<suffix> and ARYL_WORKER_ID ('" +
                                   worker_id + "') a number");
  }
  protocol::Client::Options opts;
  opts.endpoint = endpoint;
  // The identity the agent issued this worker (ARYL_CHANNEL_ID; an agent that
  // issues none expects "worker-<job>-<worker>").
  opts.identity = channel_id.empty() ? "worker-" + job_id + "-" + worker_id : channel_id;
  ARYL_ASSIGN_OR_RETURN(ch->client_, protocol::Client::Connect(opts));
  return ch;
}

Result<GenerationRecord> AgentChannel::Hello(int64_t generation, std::chrono::milliseconds timeout) {
  protocol::WorkerHello hello;
  hello.job = job_;
  hello.worker = worker_;
  hello.pid = ::getpid();
  hello.generation = generation;
  ARYL_ASSIGN_OR_RETURN(auto announce, client_->Call<protocol::GenerationAnnounce>(hello, timeout));
  return ToRecord(announce);
}

AgentChannel::Pushes AgentChannel::Poll() {
  Pushes out;
  while (true) {
    auto msg = client_->Receive(std::chrono::milliseconds(0));
    if (!msg.ok()) break;
    if (auto* a = std::get_if<protocol::GenerationAnnounce>(&*msg)) {
      out.generations.push_back(ToRecord(*a));
    } else if (auto* c = std::get_if<protocol::WorkerCheckpointRequest>(&*msg)) {
      out.checkpoint = true;
      out.stop_after = out.stop_after || c->stop_after;
    }
  }
  return out;
}

void AgentChannel::ReportResize(const ResizeReport& r) {
  protocol::WorkerResizeReport m;
  m.job = job_;
  m.worker = worker_;
  m.generation = r.to_generation;
  m.from_workers = r.from_world;
  m.to_workers = r.to_world;
  m.planned = r.planned;
  m.phases.detect = r.detect_s;
  m.phases.agree = r.agree_s;
  m.phases.rendezvous = r.rendezvous_s;
  m.phases.communicator = r.communicator_s;
  m.phases.state_transfer = r.transfer_s;
  m.phases.total = r.total_s;
  (void)client_->Send(m, kSendTimeout);
}

void AgentChannel::ReportCheckpoint(int64_t generation, int64_t step, const std::string& path, int64_t bytes,
                                    double seconds, const std::string& error) {
  protocol::CheckpointReport m;
  m.job = job_;
  m.worker = worker_;
  m.generation = generation;
  m.step = step;
  m.path = path;
  m.bytes = bytes;
  m.seconds = seconds;
  m.error = error.substr(0, 1000);
  (void)client_->Send(m, kSendTimeout);
}

void AgentChannel::ReportProgress(int64_t generation, int64_t step, double loss, double steps_per_second,
                                  double remaining, std::optional<protocol::StepStats> stats) {
  protocol::WorkerProgress m;
  m.job = job_;
  m.worker = worker_;
  m.generation = generation;
  m.step = step;
  m.loss = loss;
  m.steps_per_second = steps_per_second;
  m.remaining_work = remaining;
  m.stats = std::move(stats);
  (void)client_->Send(m, kSendTimeout);
}

void AgentChannel::Leave(int64_t generation, int64_t step) {
  protocol::WorkerLeave m;
  m.job = job_;
  m.worker = worker_;
  m.generation = generation;
  m.step = step;
  (void)client_->Send(m, kSendTimeout);
}

Status AgentChannel::Done(int64_t generation, int64_t step, const std::string& outcome, const std::string& message,
                          std::chrono::milliseconds timeout) {
  protocol::WorkerDone m;
  m.job = job_;
  m.worker = worker_;
  m.generation = generation;
  m.step = step;
  m.outcome = outcome;
  m.message = message;
  return client_->Call<protocol::Ok>(m, timeout).status();
}

}  // namespace aryl
