// SpeedModels::ToJson / FromJson: the journal form of every job's samples,
// prior and fit, and of the cluster's knowledge (the pools of finished jobs).
#include <algorithm>

#include <nlohmann/json.hpp>

#include "aryl/sched/speed_models.h"

namespace aryl::sched {
namespace {

using json = nlohmann::json;

json ParamsJson(const SpeedParams& p) {
  return {{"alpha_c", p.alpha_c}, {"beta_c", p.beta_c},        {"alpha_r", p.alpha_r},
          {"beta_r", p.beta_r},   {"alpha_n", p.alpha_n},      {"beta_n", p.beta_n},
          {"gamma", p.gamma},     {"type_speed", p.type_speed}};
}

SpeedParams ParamsFrom(const json& j) {
  SpeedParams p;
  p.alpha_c = j.at("alpha_c").get<double>();
  p.beta_c = j.at("beta_c").get<double>();
  p.alpha_r = j.at("alpha_r").get<double>();
  p.beta_r = j.at("beta_r").get<double>();
  p.alpha_n = j.at("alpha_n").get<double>();
  p.beta_n = j.at("beta_n").get<double>();
  p.gamma = j.at("gamma").get<double>();
  p.type_speed = j.at("type_speed").get<std::map<std::string, double>>();
  return p;
}

json SampleJson(const StepSample& s) {
  return {{"gpu_type", s.gpu_type},   {"workers", s.workers},
          {"nodes", s.nodes},         {"local_batch", s.local_batch},
          {"step_time", s.step_time}, {"spread", s.spread},
          {"count", s.count}};
}

StepSample SampleFrom(const json& j) {
  StepSample s;
  s.gpu_type = j.at("gpu_type").get<std::string>();
  s.workers = j.at("workers").get<int>();
  s.nodes = j.at("nodes").get<int>();
  s.local_batch = j.at("local_batch").get<double>();
  s.step_time = j.at("step_time").get<double>();
  s.spread = j.at("spread").get<double>();
  s.count = j.at("count").get<int>();
  return s;
}

PriorSource SourceFrom(const std::string& name) {
  for (PriorSource s : {PriorSource::kCatalog, PriorSource::kSameModel, PriorSource::kCluster}) {
    if (name == PriorSourceName(s)) return s;
  }
  return PriorSource::kOptimistic;
}

}  // namespace

std::string SpeedParamsToJson(const SpeedParams& p) { return ParamsJson(p).dump(); }

Result<SpeedParams> SpeedParamsFromJson(const std::string& text) {
  try {
    return ParamsFrom(json::parse(text));
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("speed parameters: ") + e.what());
  }
}

std::string SpeedModels::ToJson() const {
  json jobs = json::array();
  std::vector<JobId> ids;
  ids.reserve(jobs_.size());
  for (const auto& [id, m] : jobs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());  // the same text for the same models
  for (JobId id : ids) {
    const JobSpeedModel& m = jobs_.at(id);
    json samples = json::array();
    for (std::size_t i = 0; i < m.samples_.size(); ++i) {
      json s = SampleJson(m.samples_[i]);
      s["fitted_count"] = m.fitted_count_[i];
      samples.push_back(std::move(s));
    }
    jobs.push_back({{"job", id},
                    {"model", m.model_},
                    {"global_batch", m.global_batch_},
                    {"prior", ParamsJson(m.prior_.params)},
                    {"prior_sigma", m.prior_.sigma},
                    {"prior_type_sigma", m.prior_.type_sigma},
                    {"prior_source", PriorSourceName(m.source_)},
                    {"fit", ParamsJson(m.params_)},
                    {"fits", m.fits_},
                    {"samples", std::move(samples)}});
  }
  auto pool_json = [](const Pool& p) {
    json types = json::object();
    for (const auto& [t, ns] : p.type_log) types[t] = {ns.first, ns.second};
    return json{{"n", p.n}, {"log_sum", p.log_sum}, {"type_log", std::move(types)}};
  };
  json pools = json::object();
  for (const auto& [model, p] : by_model_) pools[model] = pool_json(p);
  return json{{"version", 1},
              {"jobs", std::move(jobs)},
              {"by_model", std::move(pools)},
              {"all", pool_json(all_)}}
      .dump();
}

Result<SpeedModels> SpeedModels::FromJson(const std::string& text, SpeedModelOptions options) {
  SpeedModels out(std::move(options));
  try {
    const json doc = json::parse(text);
    if (doc.at("version").get<int>() != 1)
      return Status::Corruption("speed models: unknown version");
    for (const json& j : doc.at("jobs")) {
      SpeedPrior prior{ParamsFrom(j.at("prior")), j.at("prior_sigma").get<double>(),
                       j.at("prior_type_sigma").get<double>()};
      JobSpeedModel m(j.at("model").get<std::string>(), j.at("global_batch").get<double>(),
                      std::move(prior), SourceFrom(j.at("prior_source").get<std::string>()));
      m.params_ = ParamsFrom(j.at("fit"));
      m.fits_ = j.at("fits").get<int>();
      for (const json& s : j.at("samples")) {
        m.samples_.push_back(SampleFrom(s));
        m.fitted_count_.push_back(s.at("fitted_count").get<int>());
      }
      const JobId id = j.at("job").get<JobId>();
      if (!out.jobs_.emplace(id, std::move(m)).second) {
        return Status::Corruption("speed models: job " + std::to_string(id) + " twice");
      }
    }
    auto pool_from = [](const json& j) {
      Pool p;
      p.n = j.at("n").get<int>();
      p.log_sum = j.at("log_sum").get<std::vector<double>>();
      for (const auto& [t, v] : j.at("type_log").items())
        p.type_log[t] = {v.at(0).get<int>(), v.at(1).get<double>()};
      return p;
    };
    for (const auto& [model, p] : doc.at("by_model").items()) out.by_model_[model] = pool_from(p);
    out.all_ = pool_from(doc.at("all"));
    if (out.all_.n > 0 && out.all_.log_sum.size() != 7)
      return Status::Corruption("speed models: bad pool");
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("speed models: ") + e.what());
  }
  return out;
}

}  // namespace aryl::sched
