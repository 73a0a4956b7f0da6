// The live system's deterministic simulation (simtest/include/aryl/simtest/live_sim.h).
#include "aryl/simtest/live_sim.h"

#include <gtest/gtest.h>

namespace aryl::simtest {
namespace {

std::string Describe(const Outcome& o) {
  std::string s;
  for (const auto& v : o.violations) s += v.invariant + " at " + std::to_string(v.time) + ": " + v.what + "\n";
  return s;
}

TEST(Simtest, ARunIsAFunctionOfItsSeed) {
  // The same seed twice: the same events, bit for bit; another seed differs.
  Options opt{.seed = 7, .faults = kFaultAll, .trace = true};
  auto a = RunSeed(opt), b = RunSeed(opt);
  EXPECT_EQ(a.trace, b.trace);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.end_time, b.end_time);
  opt.seed = 8;
  EXPECT_NE(RunSeed(opt).trace, a.trace);
}

TEST(Simtest, NoFaultsCompletesInOneGeneration) {
  // Without faults a job starts once and trains to its end.
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    auto o = RunSeed({.seed = seed, .faults = 0});
    EXPECT_TRUE(o.completed) << seed << "\n" << Describe(o);
    EXPECT_EQ(o.generations, 1) << seed;
    EXPECT_TRUE(o.violations.empty()) << seed << "\n" << Describe(o);
  }
}

TEST(Simtest, KillDuringAGrowDoesNotLivelock) {
  // Seeds whose kill lands on a joiner of a forming generation (a fresh start
  // or a grow onto a lent server); before the forming rule each of them
  // planned generation after generation without a trained step (I4).
  for (std::uint64_t seed : {34u, 152u, 218u, 220u, 253u, 254u, 303u, 474u}) {
    auto o = RunSeed({.seed = seed, .faults = kFaultAll, .trace = true});
    EXPECT_TRUE(o.completed) << seed << "\n" << Describe(o);
    EXPECT_TRUE(o.violations.empty()) << seed << "\n" << Describe(o);
    EXPECT_GT(o.kills, 0) << seed;
  }
}

TEST(Simtest, FreshGroupWaitsForTheOldWorkers) {
  // Seeds where a reclaim leaves no stayer while the old group still trains
  // on the lent server; before, a fresh group trained beside it (I2).
  for (std::uint64_t seed : {8266u, 15573u}) {
    auto o = RunSeed({.seed = seed, .faults = kFaultAll});
    EXPECT_TRUE(o.violations.empty()) << seed << "\n" << Describe(o);
    EXPECT_TRUE(o.completed) << seed;
  }
}

TEST(Simtest, FaultListParses) {
  EXPECT_EQ(*ParseFaults("kill,loan"), kFaultKill | kFaultLoan);
  EXPECT_EQ(*ParseFaults("all"), unsigned(kFaultAll));
  EXPECT_EQ(*ParseFaults("none"), 0u);
  auto bad = ParseFaults("kill,partition");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'partition'"), std::string::npos) << bad.status().message();
  EXPECT_EQ(FaultsString(kFaultKill | kFaultNetwork), "kill,network");
}

}  // namespace
}  // namespace aryl::simtest
