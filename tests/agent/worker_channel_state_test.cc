// The worker channel's answers and refusals, without a socket
// (worker_channel.h, WorkerChannel::State).
#include <gtest/gtest.h>

#include <variant>

#include "worker_channel.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;

p::ReplyTo From(const std::string& identity, std::optional<std::uint32_t> uid) {
  p::ReplyTo r;
  r.peer.identity = identity;
  r.peer.uid = uid;
  return r;
}

// WorkerHello is answered with the remembered generation, or NotFound;
// WorkerDone is recorded; other messages are queued for the loop.
TEST(WorkerChannelState, AnswersHelloRecordsDoneQueuesTheRest) {
  WorkerChannel::State s;
  p::WorkerHello hello;
  hello.job = 3;
  hello.generation = 8;
  auto unknown = s.Answer(From("w1", std::nullopt), hello);
  ASSERT_TRUE(unknown && std::holds_alternative<p::Error>(*unknown));
  EXPECT_EQ(std::get<p::Error>(*unknown).code, Status::Code::kNotFound);

  p::GenerationAnnounce a;
  a.job = 3;
  a.generation = 8;
  a.members = {1, 2};
  s.announced[{3, 8}] = a;
  auto known = s.Answer(From("w1", std::nullopt), hello);
  ASSERT_TRUE(known && std::holds_alternative<p::GenerationAnnounce>(*known));
  EXPECT_EQ(std::get<p::GenerationAnnounce>(*known).members.size(), 2u);
  EXPECT_TRUE(s.hello.count("w1"));

  p::WorkerDone done;
  done.job = 3;
  done.outcome = "completed";
  auto ok = s.Answer(From("w1", std::nullopt), done);
  ASSERT_TRUE(ok && std::holds_alternative<p::Ok>(*ok));
  EXPECT_EQ(s.outcome.at("w1").outcome, "completed");

  p::WorkerProgress progress;
  progress.job = 3;
  EXPECT_FALSE(s.Answer(From("w1", std::nullopt), progress).has_value());
  EXPECT_EQ(s.inbox.size(), 1u);
}

// A peer of another uid is heard only under an identity issued to that uid,
// about that identity's job.
TEST(WorkerChannelState, OtherAccountsOnlyUnderTheirIssuedIdentity) {
  WorkerChannel::State s;
  s.self_uid = 0;
  s.issued["worker-3-1-x"] = {3, 1001};
  p::WorkerProgress progress;
  progress.job = 3;
  EXPECT_FALSE(s.Refusal(From("worker-3-1-x", 1001), progress).has_value());
  EXPECT_FALSE(s.Refusal(From("anything", 0), progress).has_value());  // the agent's own uid
  EXPECT_TRUE(s.Refusal(From("worker-3-1-x", 1002), progress).has_value());  // another uid
  EXPECT_TRUE(s.Refusal(From("worker-3-1-y", 1001), progress).has_value());  // not issued
  progress.job = 4;
  auto refused = s.Refusal(From("worker-3-1-x", 1001), progress);  // another job
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(std::get<p::Error>(*refused).code, Status::Code::kPermissionDenied);
  auto answer = s.Answer(From("worker-3-1-x", 1001), progress);
  EXPECT_TRUE(answer && std::holds_alternative<p::Error>(*answer));
  EXPECT_TRUE(s.inbox.empty());  // a refused message is not queued
}

}  // namespace
}  // namespace aryl::agent
