#include "commands.h"

#include <charconv>
#include <cmath>
#include <iostream>
#include <limits>

#include "aryl/flags.h"
#include "aryl/version.h"
#include "client_config.h"

namespace aryl::cli {
namespace {

void AddClientFlags(cxxopts::Options& o, const ClientSettings& d) {
  o.add_options("client")
      ("scheduler", "Scheduler endpoint, or every scheduler as a comma list: tcp://a:7117,tcp://b:7117 "
                    "(config scheduler, $ARYL_SCHEDULER)", cxxopts::value<std::string>()->default_value(d.scheduler))
      ("timeout", "Seconds to wait for the scheduler (> 0)", cxxopts::value<double>()->default_value(Fixed(d.timeout, 3)))
      ("curve-key", "Client CURVE secret key file (config curve_key, $ARYL_CURVE_KEY)",
       cxxopts::value<std::string>()->default_value(d.curve_key))
      ("curve-server-key", "Scheduler CURVE public key file (config curve_server_key, $ARYL_CURVE_SERVER_KEY)",
       cxxopts::value<std::string>()->default_value(d.curve_server_key))
      ("o,output", "Output: table, wide, json, yaml, csv (every column) or name (the first column)", cxxopts::value<std::string>()->default_value("table"))
      ("json", "Same as -o json")
      ("no-headers", "Tables without their header line")
      ("utc", "Times in UTC instead of the local zone");
}

std::vector<Command> MetaCommands() {
  std::vector<Command> out;
  out.push_back({"completion", "bash|zsh", "print a shell completion script (source it, or see docs/operations.md)", false,
                 [](cxxopts::Options& o) {
                   o.add_options()("shell", "bash or zsh", cxxopts::value<std::string>());
                   o.parse_positional({"shell"});
                 },
                 [](const cxxopts::ParseResult& r, const Client& c) {
                   std::string shell = r.count("shell") ? r["shell"].as<std::string>() : "";
                   if (shell == "bash") std::cout << BashCompletion();
                   else if (shell == "zsh") std::cout << ZshCompletion();
                   else FlagError(c.program, "SHELL", shell, "expected bash or zsh");
                   return 0;
                 }});
  out.push_back({"version", "", "print the version, commit and build options", false, nullptr,
                 [](const cxxopts::ParseResult&, const Client&) {
                   std::cout << VersionText("aryl");
                   return 0;
                 }});
  return out;
}

}  // namespace

const std::vector<Command>& Commands() {
  static const std::vector<Command> table = [] {
    std::vector<Command> all;
    for (auto group : {JobCommands(), DescribeCommands(), LogCommands(), ClusterCommands(), QueueCommands(), TopCommands(),
                       MetaCommands()})
      for (auto& c : group) all.push_back(std::move(c));
    return all;
  }();
  return table;
}

cxxopts::Options CommandOptions(const Command& c) {
  cxxopts::Options o("aryl " + c.name, c.summary);
  if (c.flags) c.flags(o);
  if (c.client) AddClientFlags(o, ClientDefaultsOrExit("aryl " + c.name));
  AddCommonFlags(o);
  return o;
}

Client ReadClient(const std::string& program, const cxxopts::ParseResult& r) {
  Client c;
  c.program = program;
  c.scheduler = r["scheduler"].as<std::string>();
  if (auto list = protocol::ParseSchedulerEndpoints(c.scheduler); !list.ok())
    FlagError(program, "--scheduler", c.scheduler, list.status().message());
  c.timeout = r["timeout"].as<double>();
  RequireAbove(program, "--timeout", c.timeout, 0);
  if (c.timeout > 86400) FlagError(program, "--timeout", Fixed(c.timeout, 0), "must be at most 86400 (a day)");
  c.curve_key = r["curve-key"].as<std::string>();
  c.curve_server_key = r["curve-server-key"].as<std::string>();
  std::string format = r["output"].as<std::string>();
  auto f = ParseFormat(format);
  if (!f.ok()) FlagError(program, "-o", format, "expected table, wide, json, yaml, csv or name");
  c.out.format = *f;
  if (r.count("json")) c.out.format = Format::kJson;
  c.out.headers = r.count("no-headers") == 0;
  c.out.utc = r.count("utc") > 0;
  return c;
}

std::string UsageText() {
  std::string s = "usage: aryl COMMAND [flags]\n";
  for (const auto& c : Commands()) {
    std::string left = "  " + c.name + (c.synopsis.empty() ? "" : " " + c.synopsis);
    if (left.size() < 34) left += std::string(34 - left.size(), ' ');
    else left += "\n" + std::string(34, ' ');
    s += left + c.summary + "\n";
  }
  s += "client flags: --scheduler EP[,EP...], --timeout S, --curve-key F, --curve-server-key F,\n"
       "  -o table|wide|json|yaml|csv|name, --no-headers, --utc; defaults from ~/.config/aryl/config or\n"
       "  /etc/aryl/aryl.toml, then $ARYL_SCHEDULER, $ARYL_CURVE_KEY, $ARYL_CURVE_SERVER_KEY\n"
       "run 'aryl COMMAND --help' for a command's flags; 'aryl --version' for the build\n";
  return s;
}

std::optional<double> ParseDuration(const std::string& s) {
  if (s.empty()) return std::nullopt;
  double mult = 1;
  std::string num = s;
  char last = s.back();
  if (last == 's' || last == 'm' || last == 'h') {
    mult = last == 'm' ? 60 : last == 'h' ? 3600 : 1;
    num = s.substr(0, s.size() - 1);
  }
  double v = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (num.empty() || ec != std::errc() || ptr != num.data() + num.size() || !std::isfinite(v) || v < 0)
    return std::nullopt;
  return v * mult;
}

std::uint64_t ParseJobIdOrExit(const std::string& program, const std::string& text) {
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v == 0 ||
      v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    FlagError(program, "JOB", text, "not a job id (a whole number >= 1)");
  return v;
}

}  // namespace aryl::cli
