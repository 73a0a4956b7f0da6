// The table of workers an agent runs (local_workers.h).
#include <gtest/gtest.h>

#include "local_workers.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;

LocalWorker Worker(pid_t pid, p::JobId job, p::WorkerId id, std::int64_t rank, std::int64_t slot) {
  LocalWorker w;
  w.pid = pid;
  w.job = job;
  w.id = id;
  w.rank = rank;
  w.slot = slot;
  w.generation = 1;
  w.world = 3;
  return w;
}

// Job 1 runs workers 10 and 11 here, job 2 worker 20; a NewGeneration of job
// 1 drops 11 (a leaver) and makes 10 rank 1 of 2.
TEST(LocalWorkers, NewGenerationRanksAndLeavers) {
  LocalWorkers workers;
  workers.Add(Worker(100, 1, 10, 0, 0));
  workers.Add(Worker(101, 1, 11, 1, 1));
  workers.Add(Worker(200, 2, 20, 0, 1));
  EXPECT_TRUE(workers.Runs(1, 11));
  EXPECT_FALSE(workers.Runs(2, 11));
  EXPECT_EQ(workers.Jobs(), (std::set<p::JobId>{1, 2}));
  EXPECT_EQ(workers.FreeSlots(4), 2);  // slots 0 and 1 used
  EXPECT_EQ(workers.FreeSlots(1), 0);

  p::NewGeneration m;
  m.job = 1;
  m.generation = 2;
  m.members = {12, 10};
  m.leaving = {11};
  workers.Apply(m, 50);
  workers.Apply(m, 80);  // a leaver's first deadline holds
  auto w10 = workers.find(100)->second;
  EXPECT_EQ(w10.generation, 2);
  EXPECT_EQ(w10.rank, 1);
  EXPECT_EQ(w10.world, 2);
  EXPECT_EQ(workers.find(101)->second.life.leave_by(), 50);
  EXPECT_EQ(workers.find(101)->second.life.state(), WorkerLife::State::kLeaving);
  EXPECT_EQ(workers.find(200)->second.generation, 1);  // another job's

  EXPECT_TRUE(workers.OverdueLeavers(50).empty());
  EXPECT_EQ(workers.OverdueLeavers(51), std::vector<pid_t>{101});
  EXPECT_TRUE(workers.OverdueLeavers(52).empty());  // stopping: once
  EXPECT_EQ(workers.find(101)->second.life.state(), WorkerLife::State::kStopping);

  EXPECT_EQ(workers.Of(1).size(), 2u);
  auto only = workers.Of(1, {11});
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0]->pid, 101);
  workers.erase(workers.find(200));
  EXPECT_FALSE(workers.Hosts(2));
  EXPECT_EQ(workers.Running().size(), 2u);
}

}  // namespace
}  // namespace aryl::agent
