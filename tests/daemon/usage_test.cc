// UsageLedger (scheduler/daemon/src/usage.h): GPU-hours from journal rows.
#include "usage.h"

#include <gtest/gtest.h>

namespace aryl::daemon {
namespace {

EventRecord Row(double t, std::uint64_t job, const std::string& kind, const std::string& data = "{}") {
  EventRecord e;
  e.time = t;
  e.job = job;
  e.kind = kind;
  e.data = data;
  return e;
}

TEST(UsageLedgerTest, PlacementsCountUntilTheNextRowAndLoanedServersApart) {
  // Job 1 (team a): 2 workers on t from 0 s, grows onto the loaned i at 3600
  // s, is preempted at 7200 s. Job 2 (team b): 1 worker from 5400 s, still
  // running at the window's end (9000 s). The window starts at 1800 s.
  UsageLedger ledger(1800, 9000, [](std::uint64_t job) { return job == 1 ? "a" : "b"; }, {"i"});
  ledger.Add(Row(0, 1, "submit"));
  ledger.Add(Row(0, 1, "start", R"({"placement":{"t":2}})"));
  ledger.Add(Row(3600, 1, "resize", R"({"placement":{"t":2,"i":2}})"));
  ledger.Add(Row(5400, 2, "submit"));
  ledger.Add(Row(5400, 2, "start", R"({"placement":{"t":1}})"));
  ledger.Add(Row(7200, 1, "preempt"));
  ledger.Add(Row(7300, 1, "worker_exit"));
  auto rows = ledger.Finish();
  ASSERT_EQ(rows.size(), 2u);
  // a: 2 GPUs x 0.5 h (1800..3600) + 2 x 1 h on t, 2 x 1 h on i; submitted before the window.
  EXPECT_DOUBLE_EQ(rows["a"].training_gpu_hours, 1 + 2);
  EXPECT_DOUBLE_EQ(rows["a"].loaned_gpu_hours, 2);
  EXPECT_EQ(rows["a"].jobs, 0);
  EXPECT_EQ(rows["a"].preemptions, 1);
  // b: 1 GPU from 5400 s to the window's end.
  EXPECT_DOUBLE_EQ(rows["b"].training_gpu_hours, 1.0);
  EXPECT_EQ(rows["b"].jobs, 1);
}

TEST(UsageLedgerTest, EndsAndRestartsCloseAndBadDataIsNoPlacement) {
  UsageLedger ledger(0, 100000, [](std::uint64_t) { return "q"; }, {});
  ledger.Add(Row(0, 1, "start", R"({"placement":{"t":4}})"));
  ledger.Add(Row(3600, 1, "restart"));
  ledger.Add(Row(4000, 1, "start", R"({"placement":{"t":4}})"));
  ledger.Add(Row(7600, 1, "finished"));
  ledger.Add(Row(8000, 2, "start", "not json"));
  ledger.Add(Row(9000, 3, "start", R"({"placement":{"t":-1}})"));
  auto rows = ledger.Finish();
  EXPECT_DOUBLE_EQ(rows["q"].training_gpu_hours, 8);
  EXPECT_EQ(rows["q"].loaned_gpu_hours, 0);
}

}  // namespace
}  // namespace aryl::daemon
