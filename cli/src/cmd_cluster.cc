// aryl nodes [drain [--now]|resume|remove NAME] | pool offer | pool reclaim | keygen.
#include <iostream>

#include "aryl/flags.h"
#include "aryl/protocol/security.h"
#include "commands.h"

namespace p = aryl::protocol;

namespace aryl::cli {
namespace {

std::vector<std::string> Args(const cxxopts::ParseResult& r);

int Nodes(const cxxopts::ParseResult& r, const Client& c) {
  auto args = Args(r);
  if (!args.empty()) FlagError(c.program, "ACTION", args.front(), "expected drain, resume or remove (or nothing, to list)");
  auto reply = c.Call<p::NodesReply>(p::ListNodes{});
  if (!reply.ok()) return Fail(c.program, reply.status());
  if (IsDocument(c.out.format)) PrintDocument(p::ToJson(*reply), c.out.format, 2);
  else std::cout << NodesTable(reply->nodes, c.out);
  return 0;
}

int PrintOk(const Result<p::Ok>& reply, const Client& c) {
  if (!reply.ok()) return Fail(c.program, reply.status());
  if (IsDocument(c.out.format)) PrintDocument(p::ToJson(*reply), c.out.format, -1);
  else std::cout << reply->message << "\n";
  return 0;
}

std::vector<std::string> Args(const cxxopts::ParseResult& r) {
  return r.count("args") ? r["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

// aryl nodes drain|resume|remove NAME.
int NodeAction(const std::string& action, const cxxopts::ParseResult& r, const Client& c) {
  auto args = Args(r);
  if (args.size() != 1) UsageError(c.program, "expected one NAME");
  p::NodeCommand cmd;
  cmd.action = action;
  cmd.node = args[0];
  Status v = cmd.Validate();
  if (!v.ok()) UsageError(c.program, v.message());
  return PrintOk(c.Call<p::Ok>(cmd), c);
}

int Offer(const cxxopts::ParseResult& r, const Client& c) {
  p::PoolOffer m;
  m.servers = Args(r);
  if (m.servers.empty()) UsageError(c.program, "name at least one server");
  return PrintOk(c.Call<p::Ok>(m), c);
}

int Reclaim(const cxxopts::ParseResult& r, const Client& c) {
  p::PoolReclaim m;
  const std::string deadline = r["deadline"].as<std::string>();
  auto d = ParseDuration(deadline);
  if (!d) FlagError(c.program, "--deadline", deadline, "not a duration (120, 120s, 2m, 1h; finite, >= 0)");
  m.deadline_seconds = *d;
  if (r.count("servers")) m.servers = r["servers"].as<std::vector<std::string>>();
  auto args = Args(r);
  if (args.size() > 1) UsageError(c.program, "expected one count K, got " + std::to_string(args.size()) + " arguments");
  if (!args.empty()) m.count = ParseIntegerOrExit(c.program, "K", args[0], 1, 1 << 20);
  Status v = m.Validate();
  if (!v.ok()) UsageError(c.program, v.message());
  return PrintOk(c.Call<p::Ok>(m), c);
}

int Keygen(const cxxopts::ParseResult& r, const Client& c) {
  auto args = Args(r);
  if (args.size() != 2) UsageError(c.program, "expected DIR NAME");
  Status st = p::GenerateKeyPair(args[0], args[1]);
  if (!st.ok()) return Fail(c.program, st);
  std::cout << args[0] << "/" << args[1] << ".key\n" << args[0] << "/" << args[1] << ".pub\n";
  return 0;
}

auto Positional(const std::string& help) {
  return [help](cxxopts::Options& o) {
    o.add_options()("args", help, cxxopts::value<std::vector<std::string>>());
    o.parse_positional({"args"});
    o.positional_help(help);
  };
}

}  // namespace

std::string NodesTable(const std::vector<p::NodeRow>& nodes, const OutputOptions& out) {
  Table t({{"AGENT"}, {"HOST"}, {"POOL"}, {"STATE"}, {"GPU"}, {"USED/SLOTS"}, {"CONNECTED", true}, {"HEARTBEAT"}});
  for (const auto& n : nodes) {
    t.Add({n.agent_id, n.host, std::string(p::ToString(n.pool)), std::string(p::ToString(n.state)), n.gpu_type,
           std::to_string(n.used_slots) + "/" + std::to_string(n.slots), n.connected ? "yes" : "no",
           n.connected ? Fixed(n.last_heartbeat_age, 1) + "s ago" : "-"});
  }
  return t.Render(out);
}

std::vector<Command> ClusterCommands() {
  return {
      {"nodes", "", "agents: pool, loan state, slots in use", true, Positional("ACTION"), Nodes},
      {"nodes drain", "NAME [--now]",
       "no new workers on NAME; its jobs run to their end (--now: its workers move off at once, checkpointed)", true,
       [](cxxopts::Options& o) {
         Positional("NAME")(o);
         o.add_options()("now", "Move its workers off now (shrink, or preempt with a checkpoint)");
       },
       [](const cxxopts::ParseResult& r, const Client& c) {
         return NodeAction(r["now"].as<bool>() ? "drain-now" : "drain", r, c);
       }},
      {"nodes resume", "NAME", "make a drained node schedulable again", true, Positional("NAME"),
       [](const cxxopts::ParseResult& r, const Client& c) { return NodeAction("resume", r, c); }},
      {"nodes remove", "NAME", "forget a disconnected node (listings, capacity)", true, Positional("NAME"),
       [](const cxxopts::ParseResult& r, const Client& c) { return NodeAction("remove", r, c); }},
      {"pool offer", "SERVER...", "lend idle inference servers to training", true, Positional("SERVER..."), Offer},
      {"pool reclaim", "K [--deadline 120s] | --servers A,B", "take K loaned servers (or the named ones) back by a deadline",
       true,
       [](cxxopts::Options& o) {
         Positional("K")(o);
         o.add_options()
             ("deadline", "Deadline: 120, 120s, 2m", cxxopts::value<std::string>()->default_value("120s"))
             ("servers", "Exactly these servers (comma-separated)", cxxopts::value<std::vector<std::string>>());
       },
       Reclaim},
      {"keygen", "DIR NAME", "write a CURVE key pair DIR/NAME.key (0600) and DIR/NAME.pub", false,
       Positional("DIR NAME"), Keygen},
  };
}

}  // namespace aryl::cli
