#include "aryl/protocol/transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <zmq.hpp>

namespace aryl::protocol {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using SteadyClock = std::chrono::steady_clock;

std::string UniqueIpc() {
  static std::atomic<int> n{0};
  return "ipc:///tmp/aryl-proto-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) +
         ".sock";
}

std::string UniqueInproc() {
  static std::atomic<int> n{0};
  return "inproc://aryl-proto-test-" + std::to_string(n++);
}

// Echoes a CancelJob as Ok{"cancel <job>"}; everything else gets Error.
std::optional<Message> EchoHandler(const ReplyTo&, Message msg) {
  if (auto* c = std::get_if<CancelJob>(&msg))
    return Ok{.message = "cancel " + std::to_string(c->job)};
  return Error::FromStatus(Status::InvalidArgument("unexpected " + std::string(TypeName(msg))));
}

std::unique_ptr<Server> StartEcho(const std::string& endpoint) {
  auto s = Server::Start({.endpoint = endpoint}, EchoHandler);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<Client> ConnectTo(const std::string& endpoint, std::string identity = "") {
  auto c = Client::Connect({.endpoint = endpoint, .identity = std::move(identity)});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

class TransportEndpoints : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Endpoint() {
    if (GetParam() == "inproc") return UniqueInproc();
    if (GetParam() == "ipc") return UniqueIpc();
    return "tcp://127.0.0.1:*";
  }
};

// A request gets its reply over each kind of endpoint; many in a row stay matched.
TEST_P(TransportEndpoints, RequestReply) {
  auto server = StartEcho(Endpoint());
  ASSERT_TRUE(server);
  auto client = ConnectTo(server->endpoint());
  ASSERT_TRUE(client);
  for (JobId job = 1; job <= 20; ++job) {
    auto reply = client->Call<Ok>(CancelJob{.job = job}, 2000ms);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->message, "cancel " + std::to_string(job));
  }
  // An Error reply becomes the caller's Status.
  auto err = client->Call<Ok>(ListNodes{}, 2000ms);
  EXPECT_TRUE(err.status().IsInvalidArgument());
  EXPECT_THAT(err.status().message(), HasSubstr("list_nodes"));
  EXPECT_EQ(server->stats().received, 21u);
}

// The server pushes to a client by its routing id (the scheduler → agent path).
TEST_P(TransportEndpoints, PushByIdentity) {
  auto server = StartEcho(Endpoint());
  ASSERT_TRUE(server);
  auto agent = ConnectTo(server->endpoint(), "agent-7");
  ASSERT_TRUE(agent);
  // The ROUTER learns the identity from the first message.
  ASSERT_TRUE(agent->Call<Ok>(CancelJob{.job = 1}, 2000ms).ok());
  ASSERT_TRUE(server->Push("agent-7", StopWorkers{.job = 5, .grace_seconds = 1}).ok());
  auto pushed = agent->Receive(2000ms);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_TRUE(std::holds_alternative<StopWorkers>(*pushed));
  EXPECT_EQ(std::get<StopWorkers>(*pushed).job, 5u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, TransportEndpoints, ::testing::Values("inproc", "ipc", "tcp"),
                         [](const auto& info) { return info.param; });

// One-way sends reach the handler; nothing comes back.
TEST(Transport, OneWaySend) {
  std::atomic<int> heartbeats{0};
  auto server = Server::Start({.endpoint = UniqueInproc()}, [&](const ReplyTo& from, Message m) {
    EXPECT_TRUE(from.correlation.empty());
    if (std::holds_alternative<Heartbeat>(m)) ++heartbeats;
    return std::optional<Message>(Ok{});
  });
  ASSERT_TRUE(server.ok());
  auto client = ConnectTo((*server)->endpoint());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(client->Send(Heartbeat{.agent_id = "a", .seq = std::uint64_t(i)}, 1000ms).ok());
  auto deadline = SteadyClock::now() + 2s;
  while (heartbeats < 5 && SteadyClock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(heartbeats, 5);
  EXPECT_TRUE(client->Receive(50ms).status().IsTimeout());  // no reply was sent
}

// A server that never answers: the request times out within its timeout (+ margin).
TEST(Transport, RequestTimesOutAgainstSilentPeer) {
  auto server = Server::Start({.endpoint = "tcp://127.0.0.1:*"},
                              [](const ReplyTo&, Message) { return std::optional<Message>(); });
  ASSERT_TRUE(server.ok());
  auto client = ConnectTo((*server)->endpoint());
  auto start = SteadyClock::now();
  auto r = client->Request(CancelJob{.job = 1}, 200ms);
  auto took = SteadyClock::now() - start;
  EXPECT_TRUE(r.status().IsTimeout()) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("cancel_job"));
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 3000ms);  // its own timeout, not a default; generous for a loaded machine
}

// Nobody listens at all: the request times out (not connected) within its timeout.
TEST(Transport, RequestTimesOutWithoutServer) {
  auto client = ConnectTo(UniqueIpc());
  auto start = SteadyClock::now();
  auto r = client->Request(CancelJob{.job = 1}, 150ms);
  auto took = SteadyClock::now() - start;
  EXPECT_TRUE(r.status().IsTimeout()) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("not connected"));
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 3000ms);  // its own timeout, not a default; generous for a loaded machine
}

// A reply that arrives after its request timed out is not taken for the next reply.
TEST(Transport, LateReplyIsNotMistakenForTheNext) {
  std::atomic<bool> slow{true};
  auto server = Server::Start({.endpoint = UniqueInproc()}, [&](const ReplyTo&, Message m) {
    if (slow.exchange(false)) std::this_thread::sleep_for(200ms);
    return std::optional<Message>(Ok{.message = std::to_string(std::get<CancelJob>(m).job)});
  });
  ASSERT_TRUE(server.ok());
  auto client = ConnectTo((*server)->endpoint());
  EXPECT_TRUE(client->Call<Ok>(CancelJob{.job = 1}, 50ms).status().IsTimeout());
  auto second = client->Call<Ok>(CancelJob{.job = 2}, 1000ms);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->message, "2");
}

// Deferred replies from another thread reach the right request.
TEST(Transport, DeferredReplyFromAnotherThread) {
  std::mutex mu;
  std::optional<ReplyTo> pending;
  auto server = Server::Start({.endpoint = UniqueInproc()}, [&](const ReplyTo& from, Message) {
    std::lock_guard<std::mutex> lock(mu);
    pending = from;
    return std::optional<Message>();
  });
  ASSERT_TRUE(server.ok());
  std::thread replier([&] {
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (pending) {
          EXPECT_TRUE((*server)->Reply(*pending, Ok{.message = "later"}).ok());
          return;
        }
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  auto client = ConnectTo((*server)->endpoint());
  auto r = client->Call<Ok>(CancelJob{.job = 1}, 2000ms);
  replier.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->message, "later");
}

// Pushing to an unknown peer from the server thread is reported, not fatal.
TEST(Transport, PushToUnknownPeerFromHandler) {
  Status push_status;
  Server* self = nullptr;
  auto server = Server::Start({.endpoint = UniqueInproc()}, [&](const ReplyTo&, Message) {
    push_status = self->Push("nobody", Ok{});
    return std::optional<Message>(Ok{});
  });
  ASSERT_TRUE(server.ok());
  self = server->get();
  auto client = ConnectTo((*server)->endpoint());
  ASSERT_TRUE(client->Call<Ok>(CancelJob{.job = 1}, 1000ms).ok());
  EXPECT_TRUE(push_status.IsUnavailable()) << push_status;
}

// Garbage from a raw socket neither crashes nor stalls the server: malformed
// envelopes and undecodable messages are dropped or answered with Error, and
// a well-behaved client is still served.
TEST(Transport, ServerSurvivesGarbage) {
  auto server = StartEcho("tcp://127.0.0.1:*");
  ASSERT_TRUE(server);
  zmq::socket_t raw(SharedContext(), zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(server->endpoint());
  auto send = [&](std::vector<std::string> parts) {
    for (std::size_t i = 0; i < parts.size(); ++i)
      raw.send(zmq::buffer(parts[i]),
               i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  send({"just one frame"});
  send({"c1", "{not json"});
  send({"c2", R"({"v":9,"type":"ok","message":""})"});
  send({"c3", std::string("\0\xff\xfe", 3)});
  send({"", R"({"v":1,"type":"cancel_job","job":-1})"});
  send({"a", "b", "c", "d"});
  send({std::string(100, 'x'), "{}"});
  std::vector<std::string> many(20, "x");
  send(many);
  // Errors come back for frames that carried a correlation.
  std::set<std::string> answered;
  auto deadline = SteadyClock::now() + 2s;
  while (answered.size() < 5 && SteadyClock::now() < deadline) {
    zmq_pollitem_t item{raw.handle(), 0, ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, 50);
    zmq::message_t corr, body;
    if (!raw.recv(corr, zmq::recv_flags::dontwait)) continue;
    ASSERT_TRUE(corr.more());
    (void)raw.recv(body);
    auto err = DecodeAs<Error>(body.to_string_view());
    ASSERT_TRUE(err.ok()) << err.status();
    EXPECT_EQ(err->code, Status::Code::kInvalidArgument);
    answered.insert(corr.to_string());
    if (corr.to_string() == "c2") {
      EXPECT_THAT(err->message, HasSubstr("field 'v'"));
    }
  }
  EXPECT_EQ(answered, (std::set<std::string>{"c1", "c2", "c3", "a", "x"}));
  auto client = ConnectTo(server->endpoint());
  auto ok = client->Call<Ok>(CancelJob{.job = 3}, 2000ms);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(server->stats().rejected, 8u);
  EXPECT_EQ(server->stats().received, 1u);
}

// An oversize frame is cut off by ZeroMQ (the sender is disconnected); the server
// keeps serving others.
TEST(Transport, OversizeFrameIsDropped) {
  auto server = StartEcho("tcp://127.0.0.1:*");
  ASSERT_TRUE(server);
  zmq::socket_t raw(SharedContext(), zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(server->endpoint());
  std::string big(2 * kMaxFrameBytes, 'x');
  raw.send(zmq::str_buffer("c"), zmq::send_flags::sndmore);
  raw.send(zmq::buffer(big), zmq::send_flags::none);
  auto client = ConnectTo(server->endpoint());
  auto ok = client->Call<Ok>(CancelJob{.job = 4}, 2000ms);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(server->stats().received, 1u);
}

// A handler that throws answers Error{Internal} and the server keeps going.
TEST(Transport, HandlerExceptionBecomesError) {
  auto server = Server::Start({.endpoint = UniqueInproc()},
                              [](const ReplyTo&, Message m) -> std::optional<Message> {
                                if (std::holds_alternative<ListNodes>(m))
                                  throw std::runtime_error("boom");
                                return Ok{};
                              });
  ASSERT_TRUE(server.ok());
  auto client = ConnectTo((*server)->endpoint());
  auto r = client->Call<Ok>(ListNodes{}, 1000ms);
  EXPECT_EQ(r.status().code(), Status::Code::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("boom"));
  EXPECT_TRUE(client->Call<Ok>(CancelJob{.job = 1}, 1000ms).ok());
}

// The client reconnects when the server restarts on the same endpoint.
TEST(Transport, ClientReconnectsAfterServerRestart) {
  std::string endpoint = UniqueIpc();
  auto server = StartEcho(endpoint);
  auto client = ConnectTo(endpoint);
  ASSERT_TRUE(client->Call<Ok>(CancelJob{.job = 1}, 1000ms).ok());
  server.reset();
  EXPECT_FALSE(client->Call<Ok>(CancelJob{.job = 2}, 100ms).ok());
  server = StartEcho(endpoint);
  ASSERT_TRUE(server);
  auto r = client->Call<Ok>(CancelJob{.job = 3}, 3000ms);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->message, "cancel 3");
}

// An agent that reconnects under the same identity (a new socket) takes over its
// name: pushes reach the new connection.
TEST(Transport, IdentityHandover) {
  auto server = StartEcho("tcp://127.0.0.1:*");
  auto first = ConnectTo(server->endpoint(), "agent-1");
  ASSERT_TRUE(first->Call<Ok>(CancelJob{.job = 1}, 1000ms).ok());
  first->Close();
  auto second = ConnectTo(server->endpoint(), "agent-1");
  ASSERT_TRUE(second->Call<Ok>(CancelJob{.job = 2}, 1000ms).ok());
  ASSERT_TRUE(server->Push("agent-1", WorkerCheckpointRequest{.job = 9}).ok());
  auto pushed = second->Receive(1000ms);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(std::get<WorkerCheckpointRequest>(*pushed).job, 9u);
}

// One client shared by several threads: every request gets its own reply, and a
// thread waiting for pushes does not block the others' requests.
TEST(Transport, ClientIsThreadSafe) {
  auto server = StartEcho(UniqueInproc());
  auto client = ConnectTo(server->endpoint());
  std::atomic<bool> stop{false};
  std::thread receiver([&] {
    while (!stop) (void)client->Receive(20ms);
  });
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        JobId job = JobId(t * 1000 + i);
        auto r = client->Call<Ok>(CancelJob{.job = job}, 2000ms);
        if (r.ok() && r->message == "cancel " + std::to_string(job)) ++good;
      }
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  receiver.join();
  EXPECT_EQ(good.load(), 200);
}

// Bad endpoints are errors, not exceptions; a taken port is an IoError.
TEST(Transport, BadEndpoints) {
  auto bad = Server::Start({.endpoint = "carrier-pigeon://x"}, EchoHandler);
  EXPECT_TRUE(bad.status().IsInvalidArgument()) << bad.status();
  auto first = StartEcho("tcp://127.0.0.1:*");
  auto taken = Server::Start({.endpoint = first->endpoint()}, EchoHandler);
  EXPECT_FALSE(taken.ok());
  EXPECT_THAT(taken.status().message(), HasSubstr(first->endpoint()));
  auto client = Client::Connect({.endpoint = "nonsense"});
  EXPECT_TRUE(client.status().IsInvalidArgument()) << client.status();
}

// Close then Join: both idempotent; a closed client refuses with Cancelled.
TEST(Transport, TwoStepShutdown) {
  auto server = StartEcho(UniqueInproc());
  auto client = ConnectTo(server->endpoint());
  server->Close();
  server->Close();
  server->Join();
  server->Join();
  EXPECT_FALSE(server->Push("x", Ok{}).ok());
  client->Close();
  EXPECT_EQ(client->Request(Ok{}, 10ms).status().code(), Status::Code::kCancelled);
}

// The tick callback runs on schedule without traffic.
TEST(Transport, TickRuns) {
  std::atomic<int> ticks{0};
  auto server = Server::Start(
      {.endpoint = UniqueInproc(), .tick = 10ms, .on_tick = [&] { ++ticks; }}, EchoHandler);
  ASSERT_TRUE(server.ok());
  auto start = SteadyClock::now();
  while (ticks < 5 && SteadyClock::now() - start < 2s) std::this_thread::sleep_for(5ms);
  EXPECT_GE(ticks.load(), 5);
  EXPECT_LT(SteadyClock::now() - start, 1s);  // ~50 ms unloaded
}

}  // namespace
}  // namespace aryl::protocol
