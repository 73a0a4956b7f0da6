// aryl queues [reload] | usage: the scheduler's team queues and the GPU-hours
// they used (protocol/queues.h, Q2-Q4).
#include <chrono>
#include <iostream>

#include "aryl/flags.h"

#include "commands.h"

namespace p = aryl::protocol;

namespace aryl::cli {
namespace {

// "8 H100" or "8 H100, 2 A100"; "0" when none.
std::string Gpus(const std::vector<p::TypeCount>& counts) {
  std::string out;
  for (const auto& c : counts) out += (out.empty() ? "" : ", ") + std::to_string(c.gpus) + " " + c.gpu_type;
  return out.empty() ? "0" : out;
}

std::string Limit(std::int64_t v) { return v < 0 ? "-" : std::to_string(v); }

int Print(const Result<p::QueuesReply>& reply, const Client& c) {
  if (!reply.ok()) return Fail(c.program, reply.status());
  if (IsDocument(c.out.format)) {
    PrintDocument(p::ToJson(*reply), c.out.format, 2);
    return 0;
  }
  if (reply->queues.empty()) {
    std::cout << "no queues: the scheduler runs without --queues (one queue, no quotas)\n";
    return 0;
  }
  std::cout << QueuesTable(reply->queues, c.out);
  return 0;
}

int Queues(const cxxopts::ParseResult&, const Client& c) { return Print(c.Call<p::QueuesReply>(p::ListQueues{}), c); }

int Reload(const cxxopts::ParseResult&, const Client& c) {
  return Print(c.Call<p::QueuesReply>(p::ReloadQueues{}), c);
}

// --since: a duration back from now (7d, 12h, 90m, 3600) or unix seconds.
double SinceOrExit(const std::string& program, const std::string& text) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (!text.empty() && (text.back() == 'd' || text.back() == 'w')) {
    auto n = ParseDuration(text.substr(0, text.size() - 1) + "h");
    if (!n) FlagError(program, "--since", text, "not a duration (7d, 12h, 90m, 3600) or unix seconds");
    return now - *n * (text.back() == 'd' ? 24 : 168);
  }
  auto d = ParseDuration(text);
  if (!d) FlagError(program, "--since", text, "not a duration (7d, 12h, 90m, 3600) or unix seconds");
  return *d > 1e9 ? *d : now - *d;  // a value past 2001 is a time, not a duration
}

int Usage(const cxxopts::ParseResult& r, const Client& c) {
  p::UsageRequest m;
  m.since = SinceOrExit(c.program, r["since"].as<std::string>());
  m.by = r["by"].as<std::string>();
  if (Status v = m.Validate(); !v.ok()) FlagError(c.program, "--by", m.by, "expected queue or user");
  auto reply = c.Call<p::UsageReply>(m);
  if (!reply.ok()) return Fail(c.program, reply.status());
  if (IsDocument(c.out.format)) {
    PrintDocument(p::ToJson(*reply), c.out.format, 2);
    return 0;
  }
  Table t({{m.by == "queue" ? "QUEUE" : "USER"}, {"TRAINING-GPU-H"}, {"LOANED-GPU-H"}, {"JOBS"}, {"PREEMPTIONS"}});
  for (const auto& row : reply->rows)
    t.Add({row.key, Fixed(row.training_gpu_hours, 2), Fixed(row.loaned_gpu_hours, 2), std::to_string(row.jobs),
           std::to_string(row.preemptions)});
  std::cout << t.Render(c.out);
  return 0;
}

}  // namespace

std::string QueuesTable(const std::vector<p::QueueRow>& rows, const OutputOptions& out) {
  Table t({{"QUEUE"}, {"COHORT"}, {"WEIGHT"}, {"QUOTA"}, {"USED"}, {"BORROWED"}, {"LENT"}, {"LOANED"},
           {"RUNNING"}, {"PENDING"}, {"BORROW-LIMIT", true}, {"LEND-LIMIT", true}, {"USERS", true}});
  for (const auto& q : rows) {
    std::string users;
    for (const auto& u : q.users) users += (users.empty() ? "" : ",") + u;
    t.Add({q.queue, q.cohort.empty() ? "-" : q.cohort, Fixed(q.weight, 2), Gpus(q.quota), Gpus(q.used),
           Gpus(q.borrowed), Gpus(q.lent), std::to_string(q.loaned), std::to_string(q.running),
           std::to_string(q.pending), Limit(q.borrow_limit), Limit(q.lend_limit), users.empty() ? "*" : users});
  }
  return t.Render(out);
}

std::vector<Command> QueueCommands() {
  return {{"queues", "",
           "team queues: quota, used, borrowed, lent, loaned GPUs and running/pending jobs per queue", true,
           nullptr, Queues},
          {"queues reload", "",
           "operators: the scheduler reads its --queues file again (a bad file changes nothing; journaled)", true,
           nullptr, Reload},
          {"usage", "[--since 7d] [--by queue|user]",
           "GPU-hours on training and loaned servers, jobs and preemptions per queue or user, from the journal", true,
           [](cxxopts::Options& o) {
             o.add_options()("since", "From this long ago (7d, 12h, 90m, 3600) or unix seconds",
                             cxxopts::value<std::string>()->default_value("7d"))(
                 "by", "queue or user", cxxopts::value<std::string>()->default_value("queue"));
           },
           Usage}};
}

}  // namespace aryl::cli
