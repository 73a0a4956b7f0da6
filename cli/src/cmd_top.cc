// aryl top: a live view. Screen clearing only when stdout is a terminal:
// `aryl top | cat` prints plain frames, one after another.
#include <atomic>
#include <csignal>
#include <iostream>
#include <sstream>
#include <thread>

#include "aryl/flags.h"
#include "commands.h"

namespace p = aryl::protocol;

namespace aryl::cli {
namespace {

std::atomic<bool> g_stop{false};

int Top(const cxxopts::ParseResult& r, const Client& c) {
  double interval = r["interval"].as<double>();
  RequireAtLeast(c.program, "--interval", interval, 0.1);
  bool once = r.count("once") > 0;
  const bool tty = StdoutIsTty();
  auto client = c.Connect();
  if (!client.ok()) return Fail(c.program, client.status());
  std::signal(SIGINT, [](int) { g_stop = true; });
  auto timeout = c.per_try();
  bool first = true;
  while (!g_stop) {
    auto status = (*client)->Call<p::StatusReply>(p::StatusRequest{}, timeout);
    auto nodes = (*client)->Call<p::NodesReply>(p::ListNodes{}, timeout);
    auto jobs = (*client)->Call<p::JobsReply>(p::ListJobs{}, timeout);
    std::ostringstream os;
    const bool json = IsDocument(c.out.format);
    if (!json) {
      if (tty && !once) os << "\033[H\033[2J";
      else if (!first) os << "\n";
    }
    first = false;
    if (!status.ok() || !nodes.ok() || !jobs.ok()) {
      os << "aryl top: scheduler " << c.scheduler << " not answering ("
         << (!status.ok() ? status.status() : !nodes.ok() ? nodes.status() : jobs.status()).ToString() << ")\n";
    } else if (json) {
      os << (c.out.format == Format::kYaml ? "---\n" + ToYaml(status->summary) : status->summary.dump() + "\n");
    } else {
      const auto& s = status->summary;
      os << "aryl top - " << (*client)->endpoint() << "  " << FormatTime(static_cast<double>(std::time(nullptr)), c.out.utc)
         << "  policy " << s.value("policy", "?") << "  rescales " << s.value("rescales", 0.0) << "  preemptions "
         << s.value("preemptions", 0.0) << "  reclaims " << s.value("reclaims", 0.0) << " (late "
         << s.value("reclaims_late", 0.0) << ")\n\n";
      Table pools({{"POOL"}, {"SERVERS"}, {"LOANED"}, {"USED/SLOTS"}});
      const nlohmann::json pool_map = s.value("pools", nlohmann::json::object());
      for (auto& [name, pj] : pool_map.items()) {
        pools.Add({name, std::to_string(pj.value("servers", 0)), std::to_string(pj.value("loaned_servers", 0)),
                   std::to_string(pj.value("used_slots", 0)) + "/" + std::to_string(pj.value("slots", 0))});
      }
      os << pools.Render(c.out) << "\n" << NodesTable(nodes->nodes, c.out) << "\n" << JobsTable(jobs->jobs, c.out);
      auto rounds = s.value("rounds", nlohmann::json::object());
      os << "\nscheduling rounds: " << rounds.value("count", 0) << ", max "
         << Fixed(rounds.value("max_seconds", 0.0) * 1000, 2) << " ms\n";
    }
    std::cout << os.str() << std::flush;
    if (!std::cout) return 0;  // the reader went away (aryl top | head)
    if (once) return status.ok() ? 0 : 1;
    for (double t = 0; t < interval && !g_stop; t += 0.1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

}  // namespace

std::vector<Command> TopCommands() {
  return {{"top", "[--interval S] [--once]", "live view of pools, loans, jobs, sizes and step rates", true,
           [](cxxopts::Options& o) {
             o.add_options()
                 ("interval", "Refresh every S seconds (>= 0.1)", cxxopts::value<double>()->default_value("1"))
                 ("once", "Print one frame and exit");
           },
           Top}};
}

}  // namespace aryl::cli
