// channel_probe ENDPOINT JOB WORKER [IDENTITY]: sends a WorkerDone claiming
// `WORKER` of `JOB` over an agent's worker channel, under IDENTITY (default:
// the guessable "worker-JOB-WORKER"), and prints the answer. Exit 0: accepted,
// 3: refused (PermissionDenied), 1: anything else. Run as another account by
// the run-as test to forge a report for a job it does not run.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "aryl/protocol/messages.h"
#include "aryl/protocol/transport.h"

int main(int argc, char** argv) {
  namespace p = aryl::protocol;
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: channel_probe ENDPOINT JOB WORKER [IDENTITY]\n";
    return 2;
  }
  p::Client::Options o;
  o.endpoint = argv[1];
  o.identity = argc == 5 ? std::string(argv[4]) : std::string("worker-") + argv[2] + "-" + argv[3];
  auto c = p::Client::Connect(o);
  if (!c.ok()) {
    std::cout << c.status().ToString() << "\n";
    return 1;
  }
  p::WorkerDone d;
  d.job = std::strtoull(argv[2], nullptr, 10);
  d.worker = std::strtoull(argv[3], nullptr, 10);
  d.outcome = "completed";
  auto r = (*c)->Call<p::Ok>(d, std::chrono::milliseconds(5000));
  std::cout << (r.ok() ? "accepted" : r.status().ToString()) << "\n";
  return r.ok() ? 0 : r.status().IsPermissionDenied() ? 3 : 1;
}
