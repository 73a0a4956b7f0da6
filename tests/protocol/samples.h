// One filled-in example of every message, shared by the round-trip tests, the
// fuzz corpus writer and the benchmark.
#pragma once

#include <vector>

#include "aryl/protocol/messages.h"

namespace aryl::protocol::testing {

inline std::vector<Message> SampleMessages() {
  RunningWorker rw{
      .job = 12, .worker = 3, .generation = 2, .rank = 1, .local_slot = 0, .pid = 4242};
  PhaseTimings phases{.detect = 0.001,
                      .agree = 0.002,
                      .rendezvous = 0.05,
                      .communicator = 0.1,
                      .state_transfer = 0.2,
                      .total = 0.353};
  JobRow row{.job = 12,
             .name = "mlp",
             .state = JobState::kRunning,
             .workers = 4,
             .min_workers = 2,
             .max_workers = 8,
             .gpu_type = "A100",
             .generation = 3,
             .step = 1200,
             .steps_per_second = 9.5,
             .submit_time = 1.7e9,
             .rescales = 2,
             .owner = "alice",
             .queue = "vision"};
  std::vector<Message> m;
  m.push_back(AgentRegister{.agent_id = "train-01",
                            .host = "10.0.0.1",
                            .pool = Pool::kInference,
                            .gpu_type = "T4",
                            .slots = 4,
                            .workers = {rw},
                            .store_endpoint = "tcp://10.0.0.1:7200",
                            .cluster_id = "prod",
                            .instance = 0x1234abcd5678ef,
                            .seq = 17});
  m.push_back(AgentRegistered{
      .agent_id = "train-01", .heartbeat_interval_seconds = 0.5, .scheduler_epoch = 7, .store_key = "00ff",
      .term = 1201});
  m.push_back(Heartbeat{.agent_id = "train-01", .seq = 99, .free_slots = 3, .workers = {rw, rw}, .log_free_bytes = 1 << 30});
  m.push_back(StartWorkers{.job = 12,
                           .generation = 2,
                           .workers = {{.worker = 5, .rank = 1, .local_slot = 0},
                                       {.worker = 6, .rank = 2, .local_slot = 1}},
                           .members = {4, 5, 6},
                           .argv = {"./train", "--lr", "0.1", ""},
                           .env = {{"ARYL_X", "1"}, {"OMP_NUM_THREADS", "2"}},
                           .cwd = "/tmp",
                           .checkpoint_dir = "/ckpt",
                           .store_endpoint = "tcp://head:7201",
                           .store_prefix = "job/12/",
                           .owner = "alice",
                           .restart_count = 1,
                           .term = 1201});
  m.push_back(NewGeneration{.job = 12,
                            .generation = 3,
                            .members = {4, 6},
                            .leaving = {5},
                            .store_endpoint = "tcp://head:7201",
                            .store_prefix = "job/12/",
                            .term = 1201});
  m.push_back(StopWorkers{.job = 12,
                          .workers = {5},
                          .grace_seconds = 2.5,
                          .checkpoint_first = true,
                          .reason = "reclaim",
                          .term = 1201});
  m.push_back(WorkerExited{.agent_id = "train-01",
                           .job = 12,
                           .worker = 5,
                           .generation = 3,
                           .exit_code = std::nullopt,
                           .signal = 9,
                           .outcome = "interrupted",
                           .runtime = true,
                           .error = ""});
  m.push_back(WorkerExitAck{.job = 12, .worker = 6});
  m.push_back(HeartbeatAck{.seq = 41, .lease_seconds = 12.5, .scheduler_epoch = 7, .term = 1201});
  m.push_back(ResizeReport{.job = 12,
                           .generation = 3,
                           .from_workers = 3,
                           .to_workers = 2,
                           .planned = false,
                           .phases = phases});
  m.push_back(JobProgress{.job = 12,
                          .generation = 3,
                          .step = 1300,
                          .loss = 0.25,
                          .steps_per_second = 10.25,
                          .remaining_work = 700,
                          .runtime = true,
                          .stats = StepStats{.seq = 4, .generation = 3, .workers = 4, .count = 40, .median_s = 0.097,
                                             .spread_s = 0.004, .sync_median_s = 0.012, .local_batch = 32}});
  m.push_back(SubmitJob{.name = "mlp",
                        .workers = std::nullopt,
                        .min_workers = 2,
                        .max_workers = 8,
                        .gpu_type = "A100",
                        .argv = {"./train"},
                        .env = {{"A", "b c"}},
                        .checkpoint_dir = "/ckpt",
                        .cwd = "/home/u",
                        .model = "resnet50",
                        .total_work = 5000,
                        .client_token = "3f2a9c0d1e7b4a65",
                        .owner = "alice",
                        .elastic = "restart",
                        .max_restarts = 3,
                        .queue = "vision",
                        .priority = "high"});
  m.push_back(SubmitReply{.job = 12, .name = "mlp"});
  m.push_back(ListJobs{.include_finished = true});
  m.push_back(JobsReply{.jobs = {row, row}});
  m.push_back(JobStatus{.job = 12});
  m.push_back(JobStatusReply{.row = row,
                             .placement = {{.agent_id = "train-01", .workers = 2}},
                             .argv = {"./train"},
                             .exit_code = 0,
                             .message = "done",
                             .env_names = {"A"}});
  m.push_back(CancelJob{.job = 12});
  m.push_back(ListNodes{});
  m.push_back(NodesReply{.nodes = {{.agent_id = "inf-02",
                                    .host = "h2",
                                    .pool = Pool::kInference,
                                    .state = NodeState::kLoaned,
                                    .gpu_type = "T4",
                                    .slots = 4,
                                    .used_slots = 2,
                                    .connected = true,
                                    .last_heartbeat_age = 0.4}}});
  m.push_back(NodeCommand{.node = "train-03", .action = "drain"});
  m.push_back(PoolOffer{.servers = {"inf-01", "inf-02"}});
  m.push_back(PoolReclaim{.count = 2, .servers = {}, .deadline_seconds = 120});
  m.push_back(WatchJob{.job = 12, .output = false});
  m.push_back(JobEvent{.job = 12,
                       .time = 1.7e9,
                       .state = JobState::kFailed,
                       .workers = 0,
                       .output = {"step 10 loss 0.5", "bye \xc3\xa9"},
                       .message = "worker 4 (rank 1) on gpu-7 exited with 3",
                       .exit_code = 3,
                       .final = true,
                       .failure = WorkerEnd{.worker = 4, .rank = 1, .node = "gpu-7", .exit_code = 3}});
  m.push_back(StatusRequest{});
  m.push_back(StatusReply{.summary = {{"jobs", {{"running", 1}}}, {"loaned", 2}}});
  m.push_back(Ok{.message = "cancelled"});
  m.push_back(Error{.code = Status::Code::kNotFound, .message = "job 13 not found"});
  m.push_back(WorkerHello{.job = 12, .worker = 5, .pid = 777, .generation = 2});
  m.push_back(GenerationAnnounce{.job = 12,
                                 .generation = 3,
                                 .members = {4, 6},
                                 .store_endpoint = "ipc:///tmp/s",
                                 .store_prefix = "job/12/"});
  m.push_back(WorkerResizeReport{.job = 12,
                                 .worker = 4,
                                 .generation = 3,
                                 .from_workers = 3,
                                 .to_workers = 2,
                                 .planned = true,
                                 .phases = phases});
  m.push_back(WorkerProgress{.job = 12,
                             .worker = 4,
                             .generation = 3,
                             .step = 1301,
                             .loss = 0.125,
                             .steps_per_second = 11,
                             .remaining_work = 699,
                             .stats = StepStats{.seq = 5, .generation = 3, .workers = 4, .count = 16,
                                                .median_s = 0.095, .spread_s = 0, .sync_median_s = 0, .local_batch = 0}});
  m.push_back(WorkerCheckpointRequest{
      .job = 12, .reason = "preemption", .deadline_seconds = 30, .stop_after = true, .term = 1201});
  m.push_back(WorkerLeave{.job = 12, .worker = 5, .generation = 3, .step = 1300});
  m.push_back(WorkerDone{
      .job = 12, .worker = 5, .generation = 3, .step = 1300, .outcome = "stopped", .message = ""});
  m.push_back(StoreSet{.key = "job/12/g3/rank0", .value = {std::string("\x00\x01\xff\x80z", 5)}, .token = "12-1:ab"});
  m.push_back(StoreGet{.key = "job/12/g3/rank0", .timeout_ms = 250});
  m.push_back(StoreAdd{.key = "job/12/g3/count", .delta = -2});
  m.push_back(StoreCompareSet{.key = "k", .expected = {"a"}, .desired = {"bb"}});
  m.push_back(StoreWait{.keys = {"a", "b"}, .timeout_ms = 100});
  m.push_back(StoreCheck{.keys = {"a"}});
  m.push_back(StoreDeleteKey{.key = "a"});
  m.push_back(StoreReply{.value = Bytes{"xyz"}, .number = 3, .flag = true});
  EventRow ev{.seq = 41,
              .time = 1.7e9 + 5,
              .job = 12,
              .nodes = {"train-01", "train-02"},
              .kind = "resize",
              .detail = "generation 3 on train-01:2,train-02:2 (grow)",
              .data = {{"generation", 3}, {"reason", "grow"}}};
  m.push_back(DescribeJob{.job = 12});
  m.push_back(JobDescription{
      .row = row,
      .argv = {"./train", "--lr", "0.1"},
      .env_names = {"WANDB_API_KEY"},
      .cwd = "/work",
      .checkpoint_dir = "/ckpt",
      .model = "resnet50",
      .total_work = 5000,
      .start_time = 1.7e9 + 1,
      .end_time = 0,
      .exit_code = std::nullopt,
      .message = "grow",
      .placement = {{"train-01", 2}, {"train-02", 2}},
      .rank0_worker = 4,
      .history = {{.time = 1.7e9 + 1, .kind = "start", .generation = 1, .placement = {{"train-01", 2}}, .reason = "fits"},
                  {.time = 1.7e9 + 5, .kind = "resize", .generation = 3, .placement = {{"train-01", 2}, {"train-02", 2}},
                   .reason = "grow"}},
      .rescales = {{.time = 1.7e9 + 6, .generation = 3, .store_generation = 3000, .from_workers = 2, .to_workers = 4, .planned = true, .phases = phases}},
      .preemptions = {{.time = 1.7e9 + 3, .node = "", .worker = -1, .message = "reclaim of inf-03"}},
      .exec_errors = {{.time = 1.7e9 + 2, .node = "train-02", .worker = 7, .message = "exec ./train: No such file"}},
      .last_checkpoint = CheckpointRow{.time = 1.7e9 + 7, .generation = 3, .step = 1200, .path = "/ckpt/step-1200",
                                       .bytes = 1 << 20, .seconds = 0.25, .node = "train-01"},
      .history_truncated = false,
      .speed = JobSpeed{.prior = "optimistic", .fits = 2, .gpu_type = "A100", .alpha_c = 0.01, .beta_c = 0.002,
                        .alpha_r = 0.003, .beta_r = 0.0005, .alpha_n = 0.01, .beta_n = 0.002, .gamma = 1.5,
                        .type_speed = {{"T4", "0.31"}},
                        .samples = {{.gpu_type = "A100", .workers = 4, .nodes = 1, .count = 400, .step_time = 0.097,
                                     .spread = 0.004, .predicted_step_time = 0.099}},
                        .predicted = {{2, 6.1}, {3, 8.4}, {4, 10.1}}}});
  m.push_back(DescribeNode{.node = "train-01"});
  m.push_back(NodeDescription{
      .row = {.agent_id = "train-01", .host = "10.0.0.1", .pool = Pool::kTraining, .state = NodeState::kAvailable,
              .gpu_type = "A100", .slots = 8, .used_slots = 2, .connected = true, .last_heartbeat_age = 0.4},
      .liveness = "live",
      .loan_state = "available",
      .reclaim_deadline = 0,
      .store_endpoint = "tcp://10.0.0.1:7200",
      .workers = {{.job = 12, .job_name = "mlp", .owner = "alice", .worker = 4, .rank = 0, .local_slot = 0,
                   .generation = 3, .leaving = false}},
      .recent_events = {ev}});
  m.push_back(ListEvents{.job = 12, .node = "train-01", .kind = "resize", .since = 1.7e9, .after = 40, .limit = 100});
  m.push_back(EventsReply{.events = {ev}, .more = true, .next_after = 41});
  m.push_back(JobLogs{.job = 12, .rank = 1, .worker = 5, .stream = "stderr", .offset = 4096, .max_bytes = 65536});
  m.push_back(LogRead{.request = 9, .job = 12, .worker = 5, .stream = "stdout", .offset = 0, .max_bytes = 1024});
  m.push_back(LogReadReply{.request = 9, .agent_id = "train-01", .offset = 0, .data = {std::string("step=1\n\xff", 8)},
                           .size = 8, .error_code = Status::Code::kNotFound, .error = "log gone"});
  m.push_back(LogChunk{.job = 12, .worker = 5, .rank = 1, .agent_id = "train-01", .stream = "stdout", .offset = 0,
                       .data = {"step=1 loss=0.5\n"}, .size = 16, .running = true});
  m.push_back(CheckpointReport{.agent_id = "train-01", .job = 12, .worker = 4, .generation = 3, .step = 1200,
                               .path = "/ckpt/step-1200", .bytes = 1 << 20, .seconds = 0.25});
  m.push_back(ServingCommand{.lend = true, .term = 7});
  m.push_back(ServingReport{.agent_id = "inf-03",
                            .status = {.state = "failed", .lent = true, .step = "drain",
                                       .error = "'curl -X POST http://127.0.0.1:8000/drain' exited with code 7",
                                       .warmup_seconds = 23.5}});
  m.push_back(ListQueues{});
  m.push_back(ReloadQueues{});
  m.push_back(UsageRequest{.since = 1.7e9, .until = 1.7e9 + 86400, .by = "user"});
  m.push_back(UsageReply{.since = 1.7e9,
                         .until = 1.7e9 + 86400,
                         .by = "user",
                         .rows = {{.key = "alice", .training_gpu_hours = 12.5, .loaned_gpu_hours = 3.25, .jobs = 4,
                                   .preemptions = 1}}});
  m.push_back(QueuesReply{.queues = {{.queue = "vision",
                                      .cohort = "lab",
                                      .weight = 2,
                                      .borrow_limit = 8,
                                      .lend_limit = -1,
                                      .users = {"alice", "bob"},
                                      .quota = {{.gpu_type = "H100", .gpus = 64}},
                                      .used = {{.gpu_type = "H100", .gpus = 70}},
                                      .borrowed = {{.gpu_type = "H100", .gpus = 6}},
                                      .lent = {},
                                      .loaned = 16,
                                      .flexible = 4,
                                      .running = 9,
                                      .pending = 3,
                                      .share = 11}}});
  return m;
}

}  // namespace aryl::protocol::testing
