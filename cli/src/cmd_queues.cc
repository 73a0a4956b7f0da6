// aryl queues [reload]: the scheduler's team queues (protocol/queues.h, Q2-Q3).
#include <iostream>

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
           nullptr, Reload}};
}

}  // namespace aryl::cli
