// SchedulerClient (scheduler_client.h) against real ZeroMQ servers on loopback:
// standbys that name the leader, dead endpoints, a list where none answers.
#include "aryl/protocol/scheduler_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

namespace aryl::protocol {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// The leader: answers CancelJob with Ok{"cancel <job> at <name>"}.
std::unique_ptr<Server> StartLeader(const std::string& name, std::atomic<int>* requests = nullptr) {
  auto s = Server::Start({.endpoint = "tcp://127.0.0.1:*"},
                         [name, requests](const ReplyTo&, Message msg) -> std::optional<Message> {
                           if (requests) ++*requests;
                           if (auto* c = std::get_if<CancelJob>(&msg))
                             return Ok{.message = "cancel " + std::to_string(c->job) + " at " + name};
                           return Error::FromStatus(Status::InvalidArgument("unexpected " + std::string(TypeName(msg))));
                         });
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// A standby: answers everything with the standby reply naming `leader`.
std::unique_ptr<Server> StartStandby(const std::string& leader, std::atomic<int>* requests = nullptr) {
  auto s = Server::Start({.endpoint = "tcp://127.0.0.1:*"},
                         [leader, requests](const ReplyTo&, Message) -> std::optional<Message> {
                           if (requests) ++*requests;
                           return StandbyError(leader, 3);
                         });
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// A loopback endpoint nobody listens on (a server bound it, then went away).
std::string DeadEndpoint() {
  auto s = Server::Start({.endpoint = "tcp://127.0.0.1:*"}, [](const ReplyTo&, Message) { return std::nullopt; });
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? (*s)->endpoint() : "tcp://127.0.0.1:1";
}

std::unique_ptr<SchedulerClient> Connect(std::vector<std::string> endpoints, std::chrono::milliseconds total,
                                         std::chrono::milliseconds backoff = 100ms) {
  SchedulerClient::Options o;
  o.endpoints = std::move(endpoints);
  o.total_timeout = total;
  o.backoff_initial = backoff;
  o.backoff_max = std::max(backoff, std::chrono::milliseconds(2000));
  auto c = SchedulerClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Lists of one or more endpoints parse; each kind of mistake names its item.
TEST(SchedulerEndpoints, Parse) {
  auto two = ParseSchedulerEndpoints("tcp://a:7117, tcp://b:7117");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(*two, (std::vector<std::string>{"tcp://a:7117", "tcp://b:7117"}));
  auto one = ParseSchedulerEndpoints("ipc:///run/aryl/scheduler.sock");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{"ipc:///run/aryl/scheduler.sock"});
  EXPECT_TRUE(ParseSchedulerEndpoints("inproc://sched,tcp://[::1]:7117").ok());

  auto empty = ParseSchedulerEndpoints("");
  EXPECT_TRUE(empty.status().IsInvalidArgument());
  auto hole = ParseSchedulerEndpoints("tcp://a:7117,,tcp://b:7117");
  EXPECT_TRUE(hole.status().IsInvalidArgument());
  EXPECT_THAT(hole.status().message(), HasSubstr("item 2 is empty"));
  auto trailing = ParseSchedulerEndpoints("tcp://a:7117,");
  EXPECT_THAT(trailing.status().message(), HasSubstr("item 2 is empty"));
  auto twice = ParseSchedulerEndpoints("tcp://a:7117,tcp://b:7117,tcp://a:7117");
  EXPECT_TRUE(twice.status().IsInvalidArgument());
  EXPECT_THAT(twice.status().message(), HasSubstr("item 3 'tcp://a:7117' is listed twice"));
  auto scheme = ParseSchedulerEndpoints("tcp://a:7117,http://b:7117");
  EXPECT_TRUE(scheme.status().IsInvalidArgument());
  EXPECT_THAT(scheme.status().message(), HasSubstr("item 2 'http://b:7117'"));
  EXPECT_THAT(ParseSchedulerEndpoints("tcp://a").status().message(), HasSubstr("'tcp://a'"));
  EXPECT_THAT(ParseSchedulerEndpoints("tcp://a:http").status().message(), HasSubstr("port 'http'"));
  EXPECT_THAT(ParseSchedulerEndpoints("ipc://").status().message(), HasSubstr("no address"));
}

// The standby reply names the leader (and its term), or says none is known;
// the hint survives a Call's Status and added context.
TEST(SchedulerEndpoints, StandbyReply) {
  Error known = StandbyError("tcp://b:7117", 42);
  EXPECT_EQ(known.code, Status::Code::kUnavailable);
  EXPECT_EQ(known.message, "standby: not the leader (term 42); the leader is tcp://b:7117");
  EXPECT_TRUE(IsStandbyError(known));
  EXPECT_EQ(LeaderHint(known), "tcp://b:7117");
  Status st = known.ToStatus().WithContext("list_jobs");
  EXPECT_TRUE(IsStandbyError(st));
  EXPECT_EQ(LeaderHint(st), "tcp://b:7117");

  Error unknown = StandbyError("", 0);
  EXPECT_EQ(unknown.message, "standby: not the leader; no leader is known yet (election in progress)");
  EXPECT_TRUE(IsStandbyError(unknown));
  EXPECT_EQ(LeaderHint(unknown), std::nullopt);

  EXPECT_FALSE(IsStandbyError(Status::Unavailable("busy")));
  EXPECT_FALSE(IsStandbyError(Status::Timeout("standby: not the leader")));
  EXPECT_EQ(LeaderHint(Error{Status::Code::kUnavailable, "standby: not the leader (term 1); the leader is nowhere"}),
            std::nullopt);
}

// A standby names the leader: the call lands there at once, whether or not
// the leader was in the list.
TEST(SchedulerClient, StandbyHintLeadsToTheLeader) {
  auto leader = StartLeader("leader");
  ASSERT_TRUE(leader);
  std::atomic<int> asked{0};
  auto standby = StartStandby(leader->endpoint(), &asked);
  ASSERT_TRUE(standby);
  for (bool listed : {true, false}) {
    std::vector<std::string> list{standby->endpoint()};
    if (listed) list.push_back(leader->endpoint());
    // A backoff longer than the check: only following the hint at once passes.
    auto client = Connect(list, 10s, 1500ms);
    ASSERT_TRUE(client);
    auto t0 = SteadyClock::now();
    auto reply = client->Call<Ok>(CancelJob{.job = 5}, 2000ms);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->message, "cancel 5 at leader");
    EXPECT_LT(SecondsSince(t0), 1.0);
    EXPECT_EQ(client->endpoint(), leader->endpoint());
    if (!listed) {
      EXPECT_EQ(client->endpoints().size(), 2u);
    }
    // It stays with the leader.
    EXPECT_TRUE(client->Call<Ok>(CancelJob{.job = 6}, 2000ms).ok());
  }
  EXPECT_EQ(asked.load(), 2);
}

// A standby that knows no leader yet: the client backs off and tries the next.
TEST(SchedulerClient, StandbyWithoutLeaderMovesOn) {
  auto leader = StartLeader("leader");
  auto standby = StartStandby("");
  ASSERT_TRUE(leader && standby);
  auto client = Connect({standby->endpoint(), leader->endpoint()}, 10s);
  ASSERT_TRUE(client);
  auto reply = client->Call<Ok>(CancelJob{.job = 1}, 2000ms);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(client->endpoint(), leader->endpoint());
}

// After the leader went silent, a standby that knows no leader yet (an
// election in progress) is asked again rather than the silent one: the
// silent endpoint gets one try, not one per "no leader yet".
TEST(SchedulerClient, StandbyInAnElectionIsAskedAgainNotTheSilentLeader) {
  std::atomic<int> silent_tries{0}, standby_tries{0};
  auto silent = Server::Start({.endpoint = "tcp://127.0.0.1:*"}, [&](const ReplyTo&, Message) -> std::optional<Message> {
    ++silent_tries;
    return std::nullopt;  // never answers, like a leader stopped dead
  });
  ASSERT_TRUE(silent.ok()) << silent.status();
  auto electing = Server::Start({.endpoint = "tcp://127.0.0.1:*"}, [&](const ReplyTo&, Message) -> std::optional<Message> {
    if (++standby_tries <= 2) return StandbyError("", 0);  // no leader is known yet
    return Ok{.message = "elected"};
  });
  ASSERT_TRUE(electing.ok()) << electing.status();
  auto client = Connect({(*silent)->endpoint(), (*electing)->endpoint()}, 10s, 50ms);
  ASSERT_TRUE(client);
  auto reply = client->Call<Ok>(CancelJob{.job = 5}, 300ms);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->message, "elected");
  EXPECT_EQ(silent_tries.load(), 1);
  EXPECT_EQ(standby_tries.load(), 3);
  EXPECT_EQ(client->endpoint(), (*electing)->endpoint());
  // With the other endpoint not silent, "no leader yet" still moves on.
  auto leader = StartLeader("leader");
  auto standby = StartStandby("");
  ASSERT_TRUE(leader && standby);
  auto other = Connect({standby->endpoint(), leader->endpoint()}, 10s);
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->Call<Ok>(CancelJob{.job = 6}, 2000ms).ok());
  EXPECT_EQ(other->endpoint(), leader->endpoint());
}

// The first endpoint is dead: the call lands on the second after one try's
// timeout and one backoff.
TEST(SchedulerClient, DeadFirstEndpoint) {
  std::string dead = DeadEndpoint();
  auto leader = StartLeader("second");
  ASSERT_TRUE(leader);
  auto client = Connect({dead, leader->endpoint()}, 10s, 100ms);
  ASSERT_TRUE(client);
  auto t0 = SteadyClock::now();
  auto reply = client->Call<Ok>(CancelJob{.job = 2}, 300ms);
  double took = SecondsSince(t0);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->message, "cancel 2 at second");
  EXPECT_EQ(client->endpoint(), leader->endpoint());
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 0.3 + 0.125 + 0.5) << "per-try timeout plus one jittered backoff, and some slack";
}

// Nobody answers: the call fails within the total timeout, naming every endpoint tried.
TEST(SchedulerClient, AllDeadFailsWithinTotalTimeout) {
  std::string a = DeadEndpoint(), b = DeadEndpoint();
  auto client = Connect({a, b}, 1000ms, 100ms);
  ASSERT_TRUE(client);
  auto t0 = SteadyClock::now();
  auto reply = client->Call<Ok>(CancelJob{.job = 3}, 200ms);
  double took = SecondsSince(t0);
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(reply.status().IsTimeout()) << reply.status();
  EXPECT_THAT(reply.status().message(), HasSubstr("tried " + a + ", " + b));
  EXPECT_GE(took, 0.7);
  EXPECT_LT(took, 1.0 + 0.5);
}

// Other errors are the answer: returned as they are, not retried elsewhere.
TEST(SchedulerClient, OtherErrorsAreNotRetried) {
  std::atomic<int> asked{0};
  auto busy = Server::Start({.endpoint = "tcp://127.0.0.1:*"}, [&](const ReplyTo&, Message) -> std::optional<Message> {
    ++asked;
    return Error::FromStatus(Status::Unavailable("busy"));
  });
  ASSERT_TRUE(busy.ok());
  auto leader = StartLeader("other");
  auto client = Connect({(*busy)->endpoint(), leader->endpoint()}, 10s);
  ASSERT_TRUE(client);
  auto reply = client->Call<Ok>(CancelJob{.job = 4}, 2000ms);
  EXPECT_TRUE(reply.status().IsUnavailable());
  EXPECT_EQ(reply.status().message(), "busy");
  EXPECT_EQ(asked.load(), 1);
  EXPECT_EQ(client->endpoint(), (*busy)->endpoint());
}

// Failover moves to the next endpoint (wrapping around); pushes come from the
// current connection, under the same identity.
TEST(SchedulerClient, FailoverAndPushes) {
  auto first = StartLeader("first");
  auto second = StartLeader("second");
  ASSERT_TRUE(first && second);
  SchedulerClient::Options o;
  o.endpoints = {first->endpoint(), second->endpoint()};
  o.identity = "agent-9";
  auto client = SchedulerClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Call<Ok>(CancelJob{.job = 1}, 2000ms).ok());
  ASSERT_TRUE((*client)->Failover("acks stopped").ok());
  EXPECT_EQ((*client)->endpoint(), second->endpoint());
  auto reply = (*client)->Call<Ok>(CancelJob{.job = 1}, 2000ms);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->message, "cancel 1 at second");
  ASSERT_TRUE(second->Push("agent-9", Ok{.message = "pushed"}).ok());
  auto pushed = (*client)->Receive(2000ms);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(std::get<Ok>(*pushed).message, "pushed");
  EXPECT_TRUE((*client)->Receive(50ms).status().IsTimeout());
  ASSERT_TRUE((*client)->Failover("again").ok());
  EXPECT_EQ((*client)->endpoint(), first->endpoint());
  (*client)->Close();
  EXPECT_EQ((*client)->Request(CancelJob{.job = 1}, 100ms).status().code(), Status::Code::kCancelled);
}

TEST(SchedulerClient, BadOptions) {
  EXPECT_TRUE(SchedulerClient::Connect({}).status().IsInvalidArgument());
  SchedulerClient::Options o;
  o.endpoints = {"tcp://a:7117,tcp://b:7117"};
  EXPECT_TRUE(SchedulerClient::Connect(o).status().IsInvalidArgument());
  o.endpoints = {"udp://a:7117"};
  EXPECT_TRUE(SchedulerClient::Connect(o).status().IsInvalidArgument());
}

}  // namespace
}  // namespace aryl::protocol
