#include "aryl/sim/workload.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "aryl/sim/random.h"
#include "csv_util.h"

namespace aryl::sim {
namespace {

int FloorPow2(int x) {
  int p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}
int CeilPow2(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// <dir>/usual_batch.csv: model -> usual global batch. Missing file: none.
Result<std::map<std::string, double>> ReadUsualBatches(const std::string& dir) {
  std::map<std::string, double> out;
  const std::string path = dir + "/usual_batch.csv";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  ARYL_ASSIGN_OR_RETURN(std::string text, internal::ReadFileToString(path));
  Status error;
  bool header = false;
  internal::ForEachLine(text, [&](int line_no, std::string_view line) {
    if (internal::Trim(line).empty() || internal::Trim(line).front() == '#') return true;
    const std::string where = "usual_batch.csv:" + std::to_string(line_no);
    auto fields = internal::SplitCsv(line);
    if (!fields.ok() || fields->size() < 2) {
      error = Status::InvalidArgument(where + ": expected model,global_batch[,source]");
      return false;
    }
    if (!header) {
      header = true;
      return true;
    }
    auto batch = internal::ParseDouble((*fields)[1]);
    if (!batch || !(*batch > 0)) {
      error = Status::InvalidArgument(where + ": global_batch: must be a number > 0: '" + (*fields)[1] + "'");
      return false;
    }
    out[(*fields)[0]] = *batch;
    return true;
  });
  if (!error.ok()) return error;
  return out;
}

// The global batch sizes of a table's data rows (its first column).
std::vector<double> RowBatches(std::string_view text) {
  std::vector<double> out;
  bool header = false;
  internal::ForEachLine(text, [&](int, std::string_view line) {
    if (internal::Trim(line).empty() || internal::Trim(line).front() == '#') return true;
    if (!header) {
      header = true;
      return true;
    }
    const auto fields = internal::Split(line);
    if (!fields.empty()) {
      if (auto b = internal::ParseDouble(fields[0])) out.push_back(*b);
    }
    return true;
  });
  return out;
}

// The row nearest `usual` (the larger on a tie); 0 (the first row) when none.
int NearestBatch(const std::vector<double>& batches, double usual) {
  double best = 0;
  for (double b : batches) {
    const double d = std::fabs(b - usual), bd = std::fabs(best - usual);
    if (best == 0 || d < bd || (d == bd && b > best)) best = b;
  }
  return static_cast<int>(best);
}

}  // namespace

Result<std::shared_ptr<const sched::ThroughputCatalog>> LoadCatalog(const std::string& dir,
                                                                    const CatalogOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound("throughput directory '" + dir + "' not found");
  struct Entry {
    sched::ThroughputCatalog::Table table;
    double batch = 0;
  };
  std::map<std::string, std::map<std::string, Entry>> tables;  // model -> type -> table
  std::map<std::string, double> usual;
  if (options.batch_size == kUsualBatch) {
    ARYL_ASSIGN_OR_RETURN(usual, ReadUsualBatches(dir));
  }
  std::vector<fs::path> type_dirs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory()) type_dirs.push_back(e.path());
  }
  std::sort(type_dirs.begin(), type_dirs.end());
  for (const auto& type_dir : type_dirs) {
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(type_dir, ec)) {
      if (f.is_regular_file() && f.path().extension() == ".csv") files.push_back(f.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      std::string source = type_dir.filename().string() + "/" + file.filename().string();
      ARYL_ASSIGN_OR_RETURN(std::string text, internal::ReadFileToString(file.string()));
      int row = options.batch_size;
      if (row == kUsualBatch) {
        auto it = usual.find(file.stem().string());
        row = it == usual.end() ? 0 : NearestBatch(RowBatches(text), it->second);
      }
      ARYL_ASSIGN_OR_RETURN(auto table, sched::ThroughputCatalog::ParseCsv(text, source, {.batch_size = row}));
      const double batch = table.batch;
      tables[file.stem().string()][type_dir.filename().string()] = Entry{std::move(table), batch};
    }
  }
  if (tables.empty()) return Status::NotFound("no throughput tables under '" + dir + "'");
  auto catalog = std::make_shared<sched::ThroughputCatalog>();
  for (auto& [model, by_type] : tables) {
    auto ref = by_type.find(options.reference_type);
    for (auto& [type, entry] : by_type) {
      double scale = ref == by_type.end() ? 1.0 : entry.batch / ref->second.batch;
      for (double& v : entry.table.values) v *= scale;
      ARYL_RETURN_IF_ERROR(catalog->AddTable(model, type, entry.table));
    }
  }
  for (const std::string& type : options.other_types) {
    if (type == options.reference_type) continue;
    ARYL_RETURN_IF_ERROR(catalog->SetRelativeSpeed(type, options.reference_type, options.relative_speed));
  }
  return std::shared_ptr<const sched::ThroughputCatalog>(std::move(catalog));
}

Result<std::pair<double, double>> ParseElasticRange(std::string_view text) {
  auto colon = text.find(':');
  auto lo = internal::ParseDouble(text.substr(0, colon));
  auto hi = colon == std::string_view::npos ? std::nullopt : internal::ParseDouble(text.substr(colon + 1));
  if (!lo || !hi || !(*lo > 0) || *lo > 1 || *hi < 1)
    return Status::InvalidArgument("--elastic-range: expected LO:HI with 0 < LO <= 1 <= HI, got '" +
                                   std::string(text) + "'");
  return std::make_pair(*lo, *hi);
}

double ModelStateBytes(const std::string& model) {
  // Parameter counts (millions) of the models of data/throughput: BERT-base,
  // DeepSpeech2 (as in ElasticFlow's setup), GPT-2 small, Inception-v3,
  // ResNet-50 (ImageNet and CIFAR-10 heads), VGG-16.
  static const std::map<std::string, double> kParamsM = {
      {"bert", 110},      {"deepspeech2", 38},       {"gpt2", 124}, {"inception3", 24},
      {"resnet50", 25.6}, {"resnet50_cifar10", 23.5}, {"vgg16", 138}};
  auto it = kParamsM.find(model);
  const double params = (it == kParamsM.end() ? 100 : it->second) * 1e6;
  return params * 4 * 3;
}

Result<std::vector<sched::JobSpec>> BuildJobs(const Trace& trace, const sched::ThroughputCatalog& catalog,
                                              const WorkloadOptions& options) {
  const std::string& ref = options.reference_type;
  // Models with a table of their own on the reference type, sorted (deterministic).
  std::vector<std::string> ref_models;
  for (const std::string& m : catalog.Models()) {
    auto types = catalog.TypesWithTable(m);
    if (std::find(types.begin(), types.end(), ref) != types.end()) ref_models.push_back(m);
  }
  std::sort(ref_models.begin(), ref_models.end());
  if (ref_models.empty()) return Status::NotFound("no throughput table for GPU type '" + ref + "'");
  // Largest allowed size per model on the reference type (for capping max).
  auto largest_allowed = [&](const std::string& model, int upto) {
    int best = 0;
    for (int w = 1; w <= upto; w *= 2) {
      if (catalog.Throughput(model, ref, w) > 0) best = w;
    }
    return best;
  };

  std::vector<sched::JobSpec> jobs;
  jobs.reserve(trace.jobs.size());
  for (const TraceJob& row : trace.jobs) {
    sched::JobSpec spec;
    spec.id = static_cast<sched::JobId>(jobs.size() + 1);
    spec.name = row.name;
    spec.submit_time = row.submit_time;
    spec.gpu_types = row.gpu_types;
    const int n = row.num_gpu;
    if (!row.model.empty()) {
      if (!catalog.HasModel(row.model))
        return Status::NotFound(row.source + ": model: no throughput table for '" + row.model + "'");
      spec.model = row.model;
    } else {
      std::vector<const std::string*> fits;
      for (const auto& m : ref_models) {
        if (catalog.Throughput(m, ref, n) > 0) fits.push_back(&m);
      }
      if (fits.empty())
        return Status::InvalidArgument(row.source + ": num_gpu: no model's " + ref + " table allows " +
                                       std::to_string(n) + " GPUs");
      spec.model = *fits[HashName(row.name) % fits.size()];
    }
    double thr = catalog.Throughput(spec.model, ref, n);
    if (!(thr > 0))
      return Status::InvalidArgument(row.source + ": num_gpu: model '" + spec.model + "' on " + ref +
                                     " does not allow " + std::to_string(n) + " GPUs");
    spec.total_work = row.duration * thr;
    spec.state_bytes = ModelStateBytes(spec.model);
    if (row.restart) spec.rescale = sched::Rescale::kRestart;

    bool elastic = row.elastic.has_value()
                       ? *row.elastic
                       : (row.min_workers || row.max_workers)
                             ? true
                             : ToUnit(HashName(row.name, options.seed ^ 0x656c6173ULL)) < options.elastic_fraction;
    if (!elastic) {
      spec.kind = sched::JobKind::kInelastic;
      spec.min_workers = spec.max_workers = n;
    } else {
      spec.kind = sched::JobKind::kElastic;
      spec.granularity.kind = sched::Granularity::Kind::kPowerOfTwo;
      int cap = largest_allowed(spec.model, 1 << 20);
      if (row.min_workers || row.max_workers) {
        spec.min_workers = row.min_workers.value_or(n);
        spec.max_workers = row.max_workers.value_or(n);
        spec.granularity.kind = sched::Granularity::Kind::kAny;
      } else {
        int lo = CeilPow2(std::max(1, static_cast<int>(std::ceil(options.elastic_lo * n - 1e-9))));
        int hi = FloorPow2(std::max(1, static_cast<int>(std::floor(options.elastic_hi * n + 1e-9))));
        spec.min_workers = std::min(lo, n);
        spec.max_workers = std::max(n, std::min(hi, cap));
      }
      spec.requested_workers = n;
      if (spec.min_workers == spec.max_workers) spec.kind = sched::JobKind::kInelastic;
    }
    jobs.push_back(std::move(spec));
  }
  return jobs;
}

}  // namespace aryl::sim
