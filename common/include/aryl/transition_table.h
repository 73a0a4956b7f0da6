// The lookups of the live system's transition tables. Each state machine
// (daemon/job_machine.h, agent/worker_life.h, agent/generation_queue.h,
// agent/serving_machine.h, agent's session_core.h, runtime's worker_phase.h)
// writes its legal transitions down once, as rows {from, event, to}; these
// read them the same way for all.
//
// Pure and constexpr; `Table` is any range of such rows (an array or a vector).
#pragma once

#include <optional>
#include <type_traits>

namespace aryl {

// The state `event` leads to from `from`: the first matching row's `to`;
// nullopt when no row allows it.
template <typename Table, typename From, typename Event>
constexpr auto TableNext(const Table& table, const From& from, const Event& event)
    -> std::optional<std::remove_cvref_t<decltype(std::begin(table)->to)>> {
  for (const auto& row : table)
    if (row.from == from && row.event == event) return row.to;
  return std::nullopt;
}

// Whether a row allows `event` to lead from `from` to `to` (tables where one
// event may lead to several states).
template <typename Table, typename From, typename Event, typename To>
constexpr bool TableAllows(const Table& table, const From& from, const Event& event, const To& to) {
  for (const auto& row : table)
    if (row.from == from && row.event == event && row.to == to) return true;
  return false;
}

}  // namespace aryl
