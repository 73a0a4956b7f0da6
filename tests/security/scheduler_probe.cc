// scheduler_probe ENDPOINT OP [ARGS]: one request to a scheduler, for tests that
// run it as another local account (the scheduler tells keyless ipc:// callers
// apart by uid). Prints the answer; exit 0: accepted, 3: refused
// (PermissionDenied), 1: anything else, 2: bad usage.
//   submit CMD...    SubmitJob of one worker running CMD in "/"; prints the id
//   cancel JOB       CancelJob
//   register ID      AgentRegister of a 4-slot agent named ID
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"

namespace p = aryl::protocol;

namespace {

template <typename Reply>
int Report(const aryl::Result<Reply>& r, const std::string& ok_text) {
  std::cout << (r.ok() ? ok_text : r.status().ToString()) << "\n";
  return r.ok() ? 0 : r.status().IsPermissionDenied() ? 3 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: scheduler_probe ENDPOINT (submit CMD... | cancel JOB | register ID)\n";
    return 2;
  }
  auto c = p::Client::Connect({.endpoint = argv[1]});
  if (!c.ok()) {
    std::cout << c.status().ToString() << "\n";
    return 1;
  }
  const std::string op = argv[2];
  const auto timeout = std::chrono::milliseconds(5000);
  if (op == "submit" && argc > 3) {
    p::SubmitJob m;
    m.argv.assign(argv + 3, argv + argc);
    m.workers = 1;
    m.cwd = "/";
    m.owner = "root";  // a client's claim; the scheduler replaces it
    auto r = (*c)->Call<p::SubmitReply>(m, timeout);
    return Report(r, r.ok() ? std::to_string(r->job) : "");
  }
  if (op == "cancel" && argc == 4) {
    p::CancelJob m;
    m.job = std::strtoull(argv[3], nullptr, 10);
    return Report((*c)->Call<p::Ok>(m, timeout), "cancelled");
  }
  if (op == "register" && argc == 4) {
    p::AgentRegister m;
    m.agent_id = argv[3];
    m.host = "127.0.0.1";
    m.pool = p::Pool::kTraining;
    m.gpu_type = "cpu";
    m.slots = 4;
    return Report((*c)->Call<p::AgentRegistered>(m, timeout), "registered");
  }
  std::cerr << "scheduler_probe: unknown or incomplete operation '" << op << "'\n";
  return 2;
}
