// A log sink that hands each line of the daemon's log to a run's trace
// (aryl-simtest --daemon --replay --daemon-log).
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <functional>
#include <mutex>
#include <string>
#include <utility>

namespace aryl::simtest {

class LogToTrace : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogToTrace(std::function<void(const std::string&)> to) : to_(std::move(to)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    to_(std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  std::function<void(const std::string&)> to_;
};

}  // namespace aryl::simtest
