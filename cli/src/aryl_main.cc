// aryl: the operator's command line. The commands are the table in commands.h
// (cmd_jobs.cc, cmd_cluster.cc, cmd_top.cc); `aryl --help` lists them.
// Exit codes: 0 ok, 1 the scheduler said no or could not be reached, 2 bad usage.
#include <csignal>
#include <iostream>

#include "aryl/flags.h"
#include "aryl/version.h"
#include "commands.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
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
  cxxopts::Options options = aryl::cli::CommandOptions(*found);
  // cxxopts skips argv[0]: parse from the last word of the command name.
  auto r = aryl::ParseFlagsOrExit(options, argc - words, argv + words);
  aryl::cli::Client client;
  client.program = prog;
  if (found->client) client = aryl::cli::ReadClient(prog, r);
  return found->run(r, client);
}
