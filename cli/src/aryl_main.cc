// aryl: the operator's command line. The commands are the table in commands.h
// (cmd_jobs.cc, cmd_cluster.cc, cmd_top.cc); `aryl --help` lists them.
// Exit codes: 0 ok, 1 the scheduler said no or could not be reached, 2 bad usage.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "aryl/flags.h"
#include "aryl/version.h"
#include "commands.h"

namespace {

// `aryl --scheduler X jobs` as kubectl takes it: the client's flags may come
// before the command; they are moved after its words, where cxxopts parses
// them. Flags that take a value take the next word unless given as --flag=V.
std::vector<char*> CommandFirst(int argc, char** argv) {
  static const char* const kWithValue[] = {"--scheduler", "--timeout", "--curve-key", "--curve-server-key",
                                           "--log-level"};
  std::vector<char*> globals;
  int i = 1;
  while (i < argc && argv[i][0] == '-' && std::string(argv[i]) != "--") {
    std::string a = argv[i];
    bool value = a.find('=') == std::string::npos;
    bool known = false;
    for (const char* f : kWithValue) known |= a == f || a.rfind(std::string(f) + "=", 0) == 0;
    if (!known) break;  // --help, --version, or not a client flag: left as given
    globals.push_back(argv[i++]);
    if (value && i < argc) globals.push_back(argv[i++]);
  }
  std::vector<char*> out = {argv[0]};
  if (globals.empty()) {
    out.insert(out.end(), argv + 1, argv + argc);
    return out;
  }
  // The command's words: one, or two when the second is not a flag ("pool reclaim").
  int words = i < argc ? 1 : 0;
  if (i + 1 < argc && argv[i + 1][0] != '-') {
    const std::string two = std::string(argv[i]) + " " + argv[i + 1];
    for (const auto& c : aryl::cli::Commands()) words = c.name == two ? 2 : words;
  }
  out.insert(out.end(), argv + i, argv + i + words);
  out.insert(out.end(), globals.begin(), globals.end());
  out.insert(out.end(), argv + i + words, argv + argc);
  return out;
}

}  // namespace

int main(int raw_argc, char** raw_argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<char*> args = CommandFirst(raw_argc, raw_argv);
  int argc = static_cast<int>(args.size());
  char** argv = args.data();
  if (argc < 2) {
    std::cerr << aryl::cli::UsageText();
    return 2;
  }
  const std::string first = argv[1];
  if (first == "-h" || first == "--help" || first == "help") {
    std::cout << aryl::cli::UsageText();
    return 0;
  }
  if (first == "--version") {
    std::cout << aryl::VersionText("aryl");
    return 0;
  }
  // The longest command name matching the first words ("pool reclaim" before "pool").
  const aryl::cli::Command* found = nullptr;
  int words = 0;
  for (const auto& c : aryl::cli::Commands()) {
    bool two = c.name.find(' ') != std::string::npos;
    std::string given = two && argc > 2 ? first + " " + argv[2] : first;
    if (c.name == given && (!found || two)) {
      found = &c;
      words = two ? 2 : 1;
    }
  }
  if (!found) {
    bool prefix = false;
    for (const auto& c : aryl::cli::Commands()) prefix |= c.name.rfind(first + " ", 0) == 0;
    if (prefix && (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h")) {
      std::cout << aryl::cli::UsageText();
      return argc < 3 ? 2 : 0;
    }
    aryl::UsageError("aryl", "unknown command '" + first + (prefix && argc > 2 ? " " + std::string(argv[2]) : "") +
                                 "' (try aryl --help)");
  }
  const std::string prog = "aryl " + found->name;
  // "aryl status -1": cxxopts would take "-1" for an unknown option '1'; a
  // negative number where a JOB goes is a bad job id, said as such.
  if (found->synopsis.find("JOB") != std::string::npos)
    for (int i = 1 + words; i < argc && std::string(argv[i]) != "--"; ++i) {
      std::string a = argv[i], before = argv[i - 1];
      bool negative = a.size() > 1 && a[0] == '-' && a.find_first_not_of("0123456789", 1) == std::string::npos;
      if (negative && (i == 1 + words || before[0] != '-'))
        aryl::UsageError(prog, "JOB '" + a + "': not a job id (a whole number >= 1)");
    }
  cxxopts::Options options = aryl::cli::CommandOptions(*found);
  // cxxopts skips argv[0]: parse from the last word of the command name.
  auto r = aryl::ParseFlagsOrExit(options, argc - words, argv + words);
  aryl::cli::Client client;
  client.program = prog;
  if (found->client) client = aryl::cli::ReadClient(prog, r);
  return found->run(r, client);
}
