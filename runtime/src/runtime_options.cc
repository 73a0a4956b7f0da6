#include <cstdlib>
#include <string>

#include "aryl/runtime.h"

namespace aryl {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

Status ReadInt(const char* name, int64_t* out, int64_t min_value) {
  const char* v = Env(name);
  if (!v) return Status::Ok();
  char* end = nullptr;
  long long parsed = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || parsed < min_value) {
    return Status::InvalidArgument(std::string(name) + "='" + v + "': expected an integer >= " +
                                   std::to_string(min_value));
  }
  *out = parsed;
  return Status::Ok();
}

template <typename T>
Status ReadAs(const char* name, T* out, int64_t min_value) {
  int64_t v = int64_t(*out);
  ARYL_RETURN_IF_ERROR(ReadInt(name, &v, min_value));
  *out = T(v);
  return Status::Ok();
}

Status ReadMs(const char* name, std::chrono::milliseconds* out) {
  int64_t v = out->count();
  ARYL_RETURN_IF_ERROR(ReadInt(name, &v, 1));
  *out = std::chrono::milliseconds(v);
  return Status::Ok();
}

void ReadString(const char* name, std::string* out) {
  if (const char* v = Env(name)) *out = v;
}

}  // namespace

Result<RuntimeOptions> RuntimeOptions::FromEnv() {
  RuntimeOptions o;
  ReadString("ARYL_JOB_ID", &o.job_id);
  ReadString("ARYL_WORKER_ID", &o.worker_id);
  ReadString("ARYL_STORE_ENDPOINT", &o.store_endpoint);
  ReadString("ARYL_AGENT_ENDPOINT", &o.agent_endpoint);
  ReadString("ARYL_CHANNEL_ID", &o.agent_channel_id);
  ReadString("ARYL_BACKEND", &o.backend);
  ReadString("ARYL_GLOO_HOST", &o.gloo_host);
  ReadString("ARYL_CHECKPOINT_DIR", &o.checkpoint_dir);
  ReadString("ARYL_FENCE_ID", &o.fence_id);
  ReadString("ARYL_MASTER_ADDR", &o.master_addr);
  ARYL_RETURN_IF_ERROR(ReadInt("ARYL_GENERATION", &o.generation, 1));
  ARYL_RETURN_IF_ERROR(ReadInt("ARYL_CHECKPOINT_EVERY", &o.checkpoint_every, 0));
  ARYL_RETURN_IF_ERROR(ReadInt("ARYL_TOTAL_STEPS", &o.total_steps, 0));
  ARYL_RETURN_IF_ERROR(ReadAs("ARYL_CHECKPOINT_KEEP", &o.checkpoint_keep, 1));
  ARYL_RETURN_IF_ERROR(ReadAs("ARYL_MIN_WORKERS", &o.min_workers, 1));
  ARYL_RETURN_IF_ERROR(ReadAs("ARYL_MAX_WORKERS", &o.max_workers, 1));
  ARYL_RETURN_IF_ERROR(ReadAs("ARYL_WORLD_SIZE", &o.world_size, 1));
  ARYL_RETURN_IF_ERROR(ReadAs("ARYL_RANK", &o.rank, 0));
  ARYL_RETURN_IF_ERROR(ReadAs("ARYL_MASTER_PORT", &o.master_port, 1));
  ARYL_RETURN_IF_ERROR(ReadMs("ARYL_COLLECTIVE_TIMEOUT_MS", &o.collective_timeout));
  ARYL_RETURN_IF_ERROR(ReadMs("ARYL_RENDEZVOUS_TIMEOUT_MS", &o.rendezvous_timeout));
  ARYL_RETURN_IF_ERROR(ReadMs("ARYL_FAULT_SETTLE_MS", &o.fault_settle));
  ARYL_RETURN_IF_ERROR(ReadMs("ARYL_POLL_MS", &o.poll_interval));
  ARYL_RETURN_IF_ERROR(ReadMs("ARYL_WAIT_WORKERS_MS", &o.wait_for_workers));
  int64_t bucket_mb = int64_t(o.bucket_bytes >> 20);
  ARYL_RETURN_IF_ERROR(ReadInt("ARYL_BUCKET_MB", &bucket_mb, 1));
  o.bucket_bytes = size_t(bucket_mb) << 20;
  if (o.backend != "gloo" && o.backend != "nccl" && o.backend != "fake") {
    return Status::InvalidArgument("ARYL_BACKEND='" + o.backend + "': expected gloo, nccl or fake");
  }
  if (o.elastic() && o.worker_id.empty()) {
    return Status::InvalidArgument("ARYL_WORKER_ID is required when ARYL_STORE_ENDPOINT is set");
  }
  if (!o.elastic() && o.rank >= o.world_size) {
    return Status::InvalidArgument("ARYL_RANK=" + std::to_string(o.rank) + " must be < ARYL_WORLD_SIZE=" +
                                   std::to_string(o.world_size));
  }
  if (!o.elastic() && o.worker_id.empty()) o.worker_id = "rank" + std::to_string(o.rank);
  if (o.min_workers > o.max_workers) {
    return Status::InvalidArgument("ARYL_MIN_WORKERS=" + std::to_string(o.min_workers) + " > ARYL_MAX_WORKERS=" +
                                   std::to_string(o.max_workers));
  }
  return o;
}

}  // namespace aryl
