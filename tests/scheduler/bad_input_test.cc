// Bad input gives an error value that names the problem and leaves the state
// exactly as it was.
#include <gtest/gtest.h>

#include "aryl/sched/throughput.h"
#include "test_util.h"

namespace aryl::sched {
namespace {

using testing::Elastic;
using testing::Harness;
using testing::Inelastic;
using testing::Servers;

// What a bad event must not change.
struct Fingerprint {
  Seconds now;
  size_t jobs, running, queued, reclaims;
  int used;
  std::vector<ServerId> loaned;
  bool operator==(const Fingerprint&) const = default;
};
Fingerprint Of(const ClusterState& s) {
  return {s.now(), s.jobs().size(), s.running().size(), s.queued().size(), s.reclaims().size(),
          s.used_gpus(), s.LoanedServers()};
}

class BadInputTest : public ::testing::Test {
 protected:
  BadInputTest() : h_(Servers(1, 2)) {
    h_.Loan({1});
    h_.Submit(Elastic(1, 2, 16, 1e6), 1);
    h_.Submit(Inelastic(2, 4, 1e6), 1);
  }
  // Sends `body` 5 s later, expects an error mentioning every `needle`.
  void ExpectRejected(EventBody body, std::vector<std::string> needles) {
    const Fingerprint before = Of(h_.state());
    auto r = h_.Try(std::move(body), 5);
    ASSERT_FALSE(r.ok());
    for (const auto& n : needles) {
      EXPECT_NE(r.status().message().find(n), std::string::npos)
          << "'" << r.status().message() << "' does not name '" << n << "'";
    }
    EXPECT_TRUE(Of(h_.state()) == before) << "state changed by a rejected event";
    EXPECT_TRUE(h_.state().CheckInvariants().ok());
  }
  Harness h_;
};

TEST_F(BadInputTest, MinGreaterThanMax) {
  // An elastic job with min 8 > max 4.
  JobSpec j = Elastic(7, 8, 4);
  ExpectRejected(JobSubmitted{j}, {"job 7", "min_workers 8", "max_workers 4"});
}

TEST_F(BadInputTest, ZeroWorkersAndZeroWork) {
  // min 0 workers; no work.
  ExpectRejected(JobSubmitted{Elastic(8, 0, 4)}, {"job 8", "min_workers"});
  ExpectRejected(JobSubmitted{Inelastic(9, 2, 0)}, {"job 9", "total_work"});
}

TEST_F(BadInputTest, UnknownGpuType) {
  // A job that asks for V100 on an A100-only cluster.
  JobSpec j = Inelastic(10, 2);
  j.gpu_types = {"V100"};
  ExpectRejected(JobSubmitted{j}, {"job 10", "V100"});
}

TEST_F(BadInputTest, UnknownModel) {
  // A model with no throughput table.
  ExpectRejected(JobSubmitted{Inelastic(11, 2, 100, "gpt-9")}, {"job 11", "gpt-9"});
}

TEST_F(BadInputTest, SizeOnlyAllowedByAnEmptyCell) {
  // 16 workers of "holes" hit a 0 cell: not allowed.
  ExpectRejected(JobSubmitted{Inelastic(12, 16, 100, "holes")}, {"job 12", "holes"});
}

TEST_F(BadInputTest, DuplicateJobId) {
  // Job 1 exists.
  ExpectRejected(JobSubmitted{Inelastic(1, 2)}, {"job 1"});
}

TEST_F(BadInputTest, ReclaimOfMoreServersThanAreLoaned) {
  // One server is loaned; a reclaim of three is refused.
  Reclaim r;
  r.count = 3;
  ExpectRejected(r, {"3", "only 1"});
  Reclaim named;
  named.servers = {2};  // held, not loaned
  ExpectRejected(named, {"server 2", "not loaned"});
}

TEST_F(BadInputTest, UnknownJobId) {
  // Finishing, cancelling or reporting progress of job 999.
  ExpectRejected(JobFinished{999}, {"job 999"});
  ExpectRejected(JobCancelled{999}, {"job 999"});
  ExpectRejected(JobProgress{999, 10}, {"job 999"});
}

TEST_F(BadInputTest, UnknownOrWrongServers) {
  // Loaning a training server, an unknown one, or one already loaned.
  ExpectRejected(ServersLoaned{{0}}, {"server 0", "training"});
  ExpectRejected(ServersLoaned{{42}}, {"server 42"});
  ExpectRejected(ServersLoaned{{1}}, {"server 1", "already loaned"});
  ExpectRejected(ServerFailed{42}, {"server 42"});
  ExpectRejected(ServerRecovered{0}, {"server 0"});
}

TEST_F(BadInputTest, EventFromThePast) {
  // Time never goes backwards.
  const Fingerprint before = Of(h_.state());
  auto r = h_.scheduler().Handle(Event{h_.now() - 1, Tick{}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("before now"), std::string::npos);
  EXPECT_TRUE(Of(h_.state()) == before);
}

TEST(BadClusterTest, ZeroGpusAndDuplicates) {
  // A server with 0 GPUs, and duplicate ids, are refused at creation.
  auto servers = Servers(2, 0);
  servers[1].gpus = 0;
  auto s = Scheduler::Create("aryl", servers, testing::Catalog());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("server 1"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("gpus"), std::string::npos) << s.status();
  servers = Servers(2, 0);
  servers[1].id = 0;
  EXPECT_FALSE(Scheduler::Create("aryl", servers, testing::Catalog()).ok());
  auto unknown = Scheduler::Create("nope", Servers(1, 0), testing::Catalog());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("nope"), std::string::npos);
  EXPECT_FALSE(Scheduler::Create("aryl:psychic", Servers(1, 0), testing::Catalog()).ok());
}

TEST(BadTableTest, EmptyNanOrZeroCellsAndGarbageNameTheFileAndLine) {
  // Tables whose chosen row has no usable cell, or a cell that is not a number.
  auto all_empty = ThroughputCatalog::ParseCsv(
      "global_batch_size,1,2,4\n64,,nan,0\n", "T4/bad.csv");
  ASSERT_FALSE(all_empty.ok());
  EXPECT_NE(all_empty.status().message().find("T4/bad.csv:2"), std::string::npos)
      << all_empty.status();
  auto garbage = ThroughputCatalog::ParseCsv(
      "global_batch_size,1,2\n64,1.0,2.0\n128,abc,1\n", "A100/x.csv");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("A100/x.csv:3"), std::string::npos)
      << garbage.status();
  EXPECT_NE(garbage.status().message().find("abc"), std::string::npos);
  auto short_row = ThroughputCatalog::ParseCsv("global_batch_size,1,2\n64,1.0\n", "m.csv");
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("m.csv:2"), std::string::npos);
  auto bad_header = ThroughputCatalog::ParseCsv("batch,1,2\n64,1,2\n", "h.csv");
  ASSERT_FALSE(bad_header.ok());
  EXPECT_NE(bad_header.status().message().find("h.csv:1"), std::string::npos);
  auto negative = ThroughputCatalog::ParseCsv("global_batch_size,1,2\n64,-1,2\n", "n.csv");
  EXPECT_FALSE(negative.ok());

  ThroughputCatalog c;
  Status zero = c.AddTable("m", "A100", {{1, 2}, {0, 0}});
  EXPECT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("m/A100"), std::string::npos) << zero;
  EXPECT_FALSE(c.AddTable("m", "A100", {{2, 1}, {1, 1}}).ok());
  EXPECT_FALSE(c.SetRelativeSpeed("T4", "A100", 0).ok());
}

}  // namespace
}  // namespace aryl::sched
