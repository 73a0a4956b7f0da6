// Pending reclaims in the state's meta (reclaim_record.h).
#include "reclaim_record.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace aryl::daemon {
namespace {

std::string Key(const std::string& node) { return "reclaim/" + node; }

}  // namespace

Status SaveReclaim(StateStore& store, const LivePendingReclaim& pr) {
  char v[96];
  std::snprintf(v, sizeof v, "%.6f %.6f %.6f", pr.start, pr.deadline, pr.ready_by);
  return store.SetMeta(Key(pr.node), v);
}

void ForgetReclaim(StateStore& store, const std::string& node) {
  Status st = store.SetMeta(Key(node), "");
  if (!st.ok()) spdlog::warn("reclaim of {}: its record stays: {}", node, st.ToString());
}

std::optional<LivePendingReclaim> LoadReclaim(StateStore& store, const std::string& node) {
  auto v = store.GetMeta(Key(node));
  if (!v.ok()) {
    spdlog::error("reclaim of {}: not read: {}", node, v.status().ToString());
    return std::nullopt;
  }
  if (!*v || (*v)->empty()) return std::nullopt;
  LivePendingReclaim pr;
  pr.node = node;
  if (std::sscanf((*v)->c_str(), "%lf %lf %lf", &pr.start, &pr.deadline, &pr.ready_by) != 3) {
    spdlog::error("state meta {}: '{}' is not 'start deadline ready_by': ignored", Key(node), **v);
    return std::nullopt;
  }
  return pr;
}

}  // namespace aryl::daemon
