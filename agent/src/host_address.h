// The address other servers reach an agent at (aryl-agent --host): where its
// rendezvous store and its workers' Gloo pairs listen, and MASTER_ADDR.
//
// ZeroMQ binds only numeric addresses (a name is read as an interface name:
// "bind 'tcp://vm:*': No such device"), so the agent binds and announces an
// IPv4 address of this server, chosen once at start:
//   1. --host given: a dotted IPv4 address, or a name resolved (getaddrinfo) to
//      one; either must be an address of this server (a socket binds to it).
//      Anything else is a usage error naming --host.
//   2. --host not given, a tcp:// scheduler: the address of the interface that
//      routes to the scheduler (a UDP connect() picks the route, sends nothing).
//   3. otherwise (an ipc:// scheduler, or no route): the host name's address
//      when it is one of this server's and not loopback; else the first
//      non-loopback address of an interface that is up; else the host name's
//      loopback address, else 127.0.0.1.
#pragma once

#include <string>

#include "aryl/result.h"

namespace aryl::agent {

struct HostChoice {
  std::string address;  // dotted IPv4, bindable on this server
  std::string why;      // for the log: how it was chosen
  // Set when the address is loopback but the scheduler is on another server:
  // the other servers' workers cannot reach this one's store (docs/operations.md).
  std::string warning;
};

// `given`: --host as typed (may be empty); `scheduler`: one scheduler endpoint.
// InvalidArgument (a usage error: exit 2) naming --host when `given` does not
// resolve to an IPv4 address of this server.
Result<HostChoice> ChooseHost(const std::string& given, const std::string& scheduler);

// True for 127.0.0.0/8.
bool IsLoopbackAddress(const std::string& dotted);

}  // namespace aryl::agent
