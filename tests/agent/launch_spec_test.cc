// A worker's launch built from its StartWorkers (launch_spec.h): the ARYL_*
// contract of docs/runtime.md, torchrun's variables, the store's token, the
// account and the worker channel's identity, without starting a process.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "aryl/protocol/generation.h"
#include "aryl/protocol/store.h"
#include "launch_spec.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;

// Job 7, scheduler generation 3, four members; this agent starts workers 11
// (rank 1, slot 0) and 13 (rank 3, slot 1).
p::StartWorkers TwoOfFour() {
  p::StartWorkers m;
  m.job = 7;
  m.generation = 3;
  m.members = {10, 11, 12, 13};
  m.workers = {{11, 1, 0}, {13, 3, 1}};
  m.argv = {"python3", "train.py"};
  m.env = {{"LR", "0.1"}};
  m.store_endpoint = "none";
  return m;
}

WorkerLaunchContext CpuAgent() {
  WorkerLaunchContext ctx;
  ctx.agent_id = "a1";
  ctx.host = "10.0.0.2";
  ctx.worker_endpoint = "ipc:///tmp/a1/worker.sock";
  ctx.job_dir = "/logs/job-7";
  return ctx;
}

// A CPU agent without a store: the contract's variables, the job's own env,
// the log files and a channel identity with the nonce.
TEST(LaunchSpec, CpuWorkerWithoutStore) {
  auto m = TwoOfFour();
  auto launch = BuildWorkerLaunch(m, m.workers[0], CpuAgent(), std::string("abcd"));
  const auto& env = launch.spec.env;
  EXPECT_EQ(launch.spec.argv, m.argv);
  EXPECT_EQ(launch.spec.cwd, "");
  EXPECT_FALSE(launch.spec.run_as.has_value());
  EXPECT_EQ(env.at("LR"), "0.1");
  EXPECT_EQ(env.at("ARYL_JOB_ID"), "7");
  EXPECT_EQ(env.at("ARYL_WORKER_ID"), "11");
  EXPECT_EQ(env.at("ARYL_GENERATION"), "3");
  EXPECT_EQ(env.at("ARYL_RANK"), "1");
  EXPECT_EQ(env.at("ARYL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("ARYL_LOCAL_SLOT"), "0");
  EXPECT_EQ(env.at("ARYL_AGENT_ID"), "a1");
  EXPECT_EQ(env.at("ARYL_AGENT_ENDPOINT"), "ipc:///tmp/a1/worker.sock");
  EXPECT_EQ(env.at("ARYL_GLOO_HOST"), "10.0.0.2");
  EXPECT_EQ(env.count("ARYL_STORE_ENDPOINT"), 0u);
  EXPECT_EQ(env.count("ARYL_STORE_TOKEN"), 0u);
  EXPECT_EQ(env.count("ARYL_CHECKPOINT_DIR"), 0u);
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(launch.channel_id, "worker-7-11-abcd");
  EXPECT_EQ(env.at("ARYL_CHANNEL_ID"), "worker-7-11-abcd");
  EXPECT_EQ(launch.spec.stdout_path, "/logs/job-7/worker-11.out");
  EXPECT_EQ(launch.spec.stderr_path, "/logs/job-7/worker-11.err");
}

// The agent's variables override the job's of the same name, except
// ARYL_GLOO_HOST, which the job may set.
TEST(LaunchSpec, AgentVariablesWinExceptTheJobsGlooHost) {
  auto m = TwoOfFour();
  m.env["ARYL_RANK"] = "99";
  m.env["ARYL_GLOO_HOST"] = "192.168.1.1";
  auto env = BuildWorkerLaunch(m, m.workers[1], CpuAgent(), std::string("n")).spec.env;
  EXPECT_EQ(env.at("ARYL_RANK"), "3");
  EXPECT_EQ(env.at("ARYL_GLOO_HOST"), "192.168.1.1");
}

// A scheduler generation 0 without a store starts in generation 1.
TEST(LaunchSpec, GenerationIsAtLeastOneWithoutStore) {
  auto m = TwoOfFour();
  m.generation = 0;
  EXPECT_EQ(StartGeneration(m, false), 1);
  EXPECT_EQ(BuildWorkerLaunch(m, m.workers[0], CpuAgent(), std::nullopt).spec.env.at("ARYL_GENERATION"), "1");
}

// With a store: the job's store key stands for the job (ARYL_JOB_ID and the
// channel identity), the generation is the plan's, and the token is the
// store key's for that job.
TEST(LaunchSpec, StoreJobGetsPlanGenerationEndpointAndToken) {
  auto m = TwoOfFour();
  m.store_endpoint = "tcp://10.0.0.9:5000";
  m.store_prefix = "7-2";
  auto ctx = CpuAgent();
  ctx.use_store = true;
  ctx.store_key = "0123456789abcdef";
  auto launch = BuildWorkerLaunch(m, m.workers[0], ctx, std::string("ff"));
  const auto& env = launch.spec.env;
  EXPECT_EQ(StartGeneration(m, true), p::PlanGeneration(3));
  EXPECT_EQ(env.at("ARYL_GENERATION"), std::to_string(p::PlanGeneration(3)));
  EXPECT_EQ(env.at("ARYL_JOB_ID"), "7-2");
  EXPECT_EQ(env.at("ARYL_STORE_ENDPOINT"), "tcp://10.0.0.9:5000");
  EXPECT_EQ(env.at("ARYL_STORE_TOKEN"), p::StoreToken("0123456789abcdef", "7-2"));
  EXPECT_EQ(launch.channel_id, "worker-7-2-11-ff");

  ctx.store_key.clear();  // not registered yet: no token
  EXPECT_EQ(BuildWorkerLaunch(m, m.workers[0], ctx, std::string("ff")).spec.env.count("ARYL_STORE_TOKEN"), 0u);
}

// A GPU agent gives each worker its slot's GPU; a checkpoint directory is passed on.
TEST(LaunchSpec, GpuSlotAndCheckpointDir) {
  auto m = TwoOfFour();
  m.checkpoint_dir = "/ckpt/7";
  auto ctx = CpuAgent();
  ctx.gpus = true;
  auto env = BuildWorkerLaunch(m, m.workers[1], ctx, std::string("n")).spec.env;
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(env.at("ARYL_LOCAL_SLOT"), "1");
  EXPECT_EQ(env.at("ARYL_CHECKPOINT_DIR"), "/ckpt/7");
}

// Without a nonce there is no ARYL_CHANNEL_ID; the identity is the bare one.
TEST(LaunchSpec, NoNonceNoChannelId) {
  auto m = TwoOfFour();
  auto launch = BuildWorkerLaunch(m, m.workers[0], CpuAgent(), std::nullopt);
  EXPECT_EQ(launch.channel_id, "worker-7-11");
  EXPECT_EQ(launch.spec.env.count("ARYL_CHANNEL_ID"), 0u);
}

// Run as an account: its credentials, names and home; the working directory
// is the job's, else the home when it exists, else "/".
TEST(LaunchSpec, AccountSetsCredentialsNamesAndWorkingDirectory) {
  auto m = TwoOfFour();
  auto ctx = CpuAgent();
  Account alice;
  alice.name = "alice";
  alice.home = "/home/alice";
  alice.credentials.uid = 1001;
  alice.credentials.gid = 1001;
  ctx.account = alice;
  ctx.account_home_exists = true;
  auto spec = BuildWorkerLaunch(m, m.workers[0], ctx, std::string("n")).spec;
  ASSERT_TRUE(spec.run_as.has_value());
  EXPECT_EQ(spec.run_as->uid, 1001u);
  EXPECT_EQ(spec.env.at("USER"), "alice");
  EXPECT_EQ(spec.env.at("LOGNAME"), "alice");
  EXPECT_EQ(spec.env.at("HOME"), "/home/alice");
  EXPECT_EQ(spec.cwd, "/home/alice");

  ctx.account_home_exists = false;
  EXPECT_EQ(BuildWorkerLaunch(m, m.workers[0], ctx, std::string("n")).spec.cwd, "/");
  m.cwd = "/data/run";
  EXPECT_EQ(BuildWorkerLaunch(m, m.workers[0], ctx, std::string("n")).spec.cwd, "/data/run");
}

// torchrun's placement: local ranks count this message's workers, the group
// is the machine's, MASTER_ADDR is the store's host.
TEST(LaunchSpec, TorchrunPlacementOfTwoWorkersHere) {
  auto m = TwoOfFour();
  m.store_endpoint = "tcp://10.0.0.9:5000";
  m.restart_count = 2;
  m.env["TORCHELASTIC_MAX_RESTARTS"] = "5";
  auto t = TorchrunPlacementOf(m, m.workers[1]);
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world_size, 2);
  EXPECT_EQ(t.group_rank, 0);  // lowest rank here (1) / 2
  EXPECT_EQ(t.group_world_size, 2);
  EXPECT_EQ(t.master_addr, "10.0.0.9");
  EXPECT_EQ(t.master_port, TorchrunMasterPort(7, 3, "tcp://10.0.0.9:5000"));
  EXPECT_EQ(t.run_id, "7");
  EXPECT_EQ(t.restart_count, 2);
  EXPECT_EQ(t.max_restarts, "5");
}

// No usable store host means loopback; ARYL_MASTER_PORT wins only when valid.
TEST(LaunchSpec, TorchrunMasterAddressAndPort) {
  auto m = TwoOfFour();
  for (const char* endpoint : {"none", "tcp://*:5000", ""}) {
    m.store_endpoint = endpoint;
    EXPECT_EQ(TorchrunPlacementOf(m, m.workers[0]).master_addr, "127.0.0.1") << endpoint;
  }
  m.store_endpoint = "none";
  int derived = TorchrunMasterPort(7, 3, "none");
  for (const char* bad : {"0", "70000", "12x", ""}) {
    m.env["ARYL_MASTER_PORT"] = bad;
    EXPECT_EQ(TorchrunPlacementOf(m, m.workers[0]).master_port, derived) << bad;
  }
  m.env["ARYL_MASTER_PORT"] = "29999";
  EXPECT_EQ(TorchrunPlacementOf(m, m.workers[0]).master_port, 29999);
  EXPECT_EQ(BuildWorkerLaunch(m, m.workers[0], CpuAgent(), std::nullopt).spec.env.at("MASTER_PORT"), "29999");
}

}  // namespace
}  // namespace aryl::agent
