#include "serving_side.h"

#include <httplib.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace aryl::agent {

namespace {

constexpr double kProbeEvery = 0.5;    // s between ready probes
constexpr double kProbeTimeout = 1.0;  // s per probe

std::string Seconds(double s) { return std::to_string(static_cast<long long>(s + 0.5)) + " s"; }

// One GET of the ready URL: "" when it answered 2xx, else why not.
std::string Probe(const HttpUrl& url) {
  httplib::Client c(url.host, url.port);
  c.set_connection_timeout(std::chrono::milliseconds(static_cast<int>(kProbeTimeout * 1000)));
  c.set_read_timeout(std::chrono::milliseconds(static_cast<int>(kProbeTimeout * 1000)));
  auto r = c.Get(url.path.c_str());
  if (!r) return "no answer (" + httplib::to_string(r.error()) + ")";
  if (r->status / 100 != 2) return "HTTP " + std::to_string(r->status);
  return "";
}

}  // namespace

Result<HttpUrl> ParseHttpUrl(const std::string& flag, const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(flag + " '" + url + "': " + why + " (expected http://host[:port][/path])");
  };
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return bad(url.rfind("https://", 0) == 0 ? "https is not supported" : "not http://");
  std::string rest = url.substr(scheme.size());
  HttpUrl out;
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    out.path = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  auto colon = rest.rfind(':');
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    try {
      std::size_t used = 0;
      out.port = std::stoi(port, &used);
      if (used != port.size() || out.port < 1 || out.port > 65535) return bad("port '" + port + "' out of range");
    } catch (...) {
      return bad("port '" + port + "' is not a number");
    }
  }
  if (rest.empty()) return bad("no host");
  out.host = rest;
  return out;
}

Result<std::unique_ptr<ServingSide>> ServingSide::Create(const AgentOptions& options, protocol::Pool pool) {
  ServingOptions so = options.serving;
  if (so.start.empty()) {
    if (!so.stop.empty() || !so.drain.empty() || !so.ready_url.empty())
      return Status::InvalidArgument("--serving-stop, --serving-drain and --serving-ready need --serving-start");
    return std::unique_ptr<ServingSide>();
  }
  if (pool != protocol::Pool::kInference)
    return Status::InvalidArgument("--serving-start is for inference agents (--pool inference), not --pool " +
                                   options.pool);
  if (!so.ready_url.empty()) ARYL_RETURN_IF_ERROR(ParseHttpUrl("--serving-ready", so.ready_url).status());
  if (so.log_path.empty()) so.log_path = (std::filesystem::path(options.log_dir) / "serving.log").string();
  spdlog::info("serving side: start '{}'{}{}{}", so.start, so.stop.empty() ? " (kept by the agent)" : ", stop '" + so.stop + "'",
               so.drain.empty() ? "" : ", drain '" + so.drain + "'", so.ready_url.empty() ? "" : ", ready " + so.ready_url);
  return std::make_unique<ServingSide>(so);
}

ServingSide::ServingSide(ServingOptions options) : opt_(std::move(options)), machine_(!opt_.drain.empty()) {
  // Agent::Create checked the URL; an unparsable one fails every probe, named.
  if (auto url = ParseHttpUrl("--serving-ready", opt_.ready_url); url.ok()) ready_url_ = *url;
}

ServingSide::~ServingSide() {
  // The serving process stays only as long as the agent (PR_SET_PDEATHSIG);
  // stop it and any hook now, bounded.
  (void)launcher_.StopAll(std::min(opt_.stop_timeout, 10.0));
}

void ServingSide::Command(bool lend) { machine_.Want(lend); }

Result<pid_t> ServingSide::Hook(const std::string& command) {
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  spec.stdout_path = opt_.log_path;
  return launcher_.Launch(spec);
}

void ServingSide::Begin(ServingMachine::Step step, double now) {
  using Step = ServingMachine::Step;
  const bool supervised = opt_.stop.empty();
  auto fail = [&](const std::string& what, const aryl::Status& st) { machine_.Failed(what, st.message()); };
  switch (step) {
    case Step::kNone:
    case Step::kProbe:
      return;
    case Step::kStart: {
      spdlog::info("serving: starting ({})", opt_.start);
      running_ = Running::kStart;
      start_deadline_ = now + opt_.start_timeout;
      next_probe_ = now;
      last_probe_error_ = "not probed yet";
      auto pid = Hook(opt_.start);
      if (!pid.ok()) return fail("start", pid.status());
      if (supervised) {
        server_pid_ = *pid;
        machine_.StartDone();
      } else {
        hook_pid_ = *pid;
        hook_deadline_ = start_deadline_;
      }
      return;
    }
    case Step::kDrain: {
      spdlog::info("serving: draining ({})", opt_.drain);
      running_ = Running::kDrain;
      auto pid = Hook(opt_.drain);
      if (!pid.ok()) return fail("drain", pid.status());
      hook_pid_ = *pid;
      hook_deadline_ = now + opt_.drain_timeout;
      return;
    }
    case Step::kStop: {
      running_ = Running::kStop;
      if (supervised) {
        spdlog::info("serving: stopping the serving process (SIGTERM, SIGKILL after {})", Seconds(opt_.stop_timeout));
        if (server_pid_ == 0) {
          running_ = Running::kNone;
          machine_.StoppedOk();
        } else {
          launcher_.RequestStop(server_pid_, opt_.stop_timeout);
        }
        return;
      }
      spdlog::info("serving: stopping ({})", opt_.stop);
      auto pid = Hook(opt_.stop);
      if (!pid.ok()) return fail("stop", pid.status());
      hook_pid_ = *pid;
      hook_deadline_ = now + opt_.stop_timeout;
      return;
    }
  }
}

// The step's hook ended: exit 0 moves on, anything else fails the step.
void ServingSide::Finish(int exit_code, const std::string& why, double now) {
  const Running was = running_;
  running_ = Running::kNone;
  hook_pid_ = 0;
  const char* step = was == Running::kStart ? "start" : was == Running::kDrain ? "drain" : "stop";
  const std::string& command = was == Running::kStart ? opt_.start : was == Running::kDrain ? opt_.drain : opt_.stop;
  if (exit_code != 0) {
    spdlog::error("serving: {} failed: '{}' {}", step, command, why);
    machine_.Failed(step, "'" + command + "' " + why);
    return;
  }
  if (was == Running::kStart) {
    running_ = Running::kStart;  // readiness follows
    machine_.StartDone();
  } else if (was == Running::kDrain) {
    machine_.Drained();
    Begin(ServingMachine::Step::kStop, now);
  } else {
    machine_.StoppedOk();
  }
}

bool ServingSide::Tick(double now, double started) {
  const int before = machine_.changes();
  if (!machine_.wanted() && now - started > protocol::kServingUnregisteredStartSeconds) {
    spdlog::warn("serving: no word from the scheduler for {} s: serving (not lent)",
                 protocol::kServingUnregisteredStartSeconds);
    machine_.Want(false);
  }
  using State = ServingMachine::State;
  for (const ExitInfo& e : launcher_.Poll()) {
    if (e.pid == hook_pid_) {
      const bool timed_out = e.killed_by_us || (e.signal == SIGKILL && now >= hook_deadline_);
      Finish(timed_out ? -1 : e.exit_code, timed_out ? "did not finish within its timeout" : e.Describe(), now);
    } else if (e.pid == server_pid_) {
      server_pid_ = 0;
      if (running_ == Running::kStop) {
        running_ = Running::kNone;
        spdlog::info("serving: the serving process {}", e.Describe());
        machine_.StoppedOk();
      } else if (machine_.state() == State::kReady || machine_.state() == State::kStarting) {
        running_ = Running::kNone;
        spdlog::error("serving: the serving process {} while {}", e.Describe(), ServingMachine::Name(machine_.state()));
        machine_.Failed(machine_.state() == State::kReady ? "serve" : "start",
                        "the serving process '" + opt_.start + "' " + e.Describe());
      }
    }
  }
  if (hook_pid_ != 0 && now >= hook_deadline_) launcher_.Signal(hook_pid_, SIGKILL);  // reaped next tick
  if (machine_.probing()) {
    if (probe_ && probe_->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      std::string why = probe_->get();
      probe_.reset();
      if (why.empty()) {
        running_ = Running::kNone;
        machine_.Ready(now);
        spdlog::info("serving: ready after {:.1f} s", machine_.warmup_seconds());
      } else {
        last_probe_error_ = why;
      }
    }
    if (machine_.probing() && now >= start_deadline_) {
      running_ = Running::kNone;
      const std::string what = opt_.ready_url.empty() ? "start" : "ready";
      machine_.Failed(what, opt_.ready_url + " not ready within " + Seconds(opt_.start_timeout) + ": " +
                                last_probe_error_);
      spdlog::error("serving: {} not ready within {}: {}", opt_.ready_url, Seconds(opt_.start_timeout),
                    last_probe_error_);
      if (server_pid_ != 0) launcher_.RequestStop(server_pid_, opt_.stop_timeout);
    } else if (machine_.probing() && opt_.ready_url.empty()) {
      running_ = Running::kNone;
      machine_.Ready(now);
    } else if (machine_.probing() && !probe_ && now >= next_probe_) {
      next_probe_ = now + kProbeEvery;
      std::promise<std::string> promise;
      probe_ = promise.get_future();
      if (!ready_url_) {
        promise.set_value("--serving-ready '" + opt_.ready_url + "' does not parse");
      } else {
        std::thread([p = std::move(promise), u = *ready_url_]() mutable { p.set_value(Probe(u)); }).detach();
      }
    }
  }
  const bool busy = hook_pid_ != 0 || (running_ == Running::kStop && server_pid_ != 0);
  if (!machine_.probing() || machine_.wanted().value_or(false)) Begin(machine_.Next(busy, now), now);
  return machine_.changes() != before;
}

protocol::ServingStatus ServingSide::Status() const {
  protocol::ServingStatus s;
  s.state = std::string(ServingMachine::Name(machine_.state()));
  s.lent = machine_.wanted().value_or(false);
  if (machine_.state() == ServingMachine::State::kFailed) {
    s.step = machine_.step();
    s.error = machine_.error();
  }
  s.warmup_seconds = machine_.warmup_seconds();
  return s;
}

}  // namespace aryl::agent
