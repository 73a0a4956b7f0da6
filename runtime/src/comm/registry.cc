#include "comm/registry.h"

#include <map>

namespace aryl {
namespace {

std::map<std::string, CommunicatorBackend, std::less<>>& Backends() {
  static auto* backends = new std::map<std::string, CommunicatorBackend, std::less<>>;  // never destroyed
  return *backends;
}

}  // namespace

bool RegisterCommunicatorBackend(std::string name, CommunicatorBackend backend) {
  Backends()[std::move(name)] = backend;
  return true;
}

const CommunicatorBackend* FindCommunicatorBackend(std::string_view name) {
  auto it = Backends().find(name);
  return it == Backends().end() ? nullptr : &it->second;
}

}  // namespace aryl
