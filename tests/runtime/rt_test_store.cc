// Serves the project's rendezvous store (protocol/store.h) in a process of its
// own, for runtime tests that stop or kill the store: prints its endpoint on
// one line, then serves until killed (or until stdin closes).
#include <cstdio>
#include <iostream>
#include <string>

#include "protocol_store.h"

int main() {
  auto server = aryl::ProtocolStoreServer::Start("tcp://127.0.0.1:*");
  if (!server.ok()) {
    std::fprintf(stderr, "rt_test_store: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", (*server)->endpoint().c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
