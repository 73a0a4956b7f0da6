#include "run_output.h"

#include <fstream>
#include <iostream>

namespace aryl::cli {

namespace p = aryl::protocol;

namespace {

const char* kProg = "aryl-run";
// The failed worker's stderr shown on failure: its last kTailLines lines
// within its last kTailBytes bytes.
constexpr std::int64_t kTailBytes = 4096;
constexpr std::size_t kTailLines = 20;
const std::chrono::milliseconds kCallTimeout{3000};

}  // namespace

std::vector<std::string> LastLines(const std::string& text, std::size_t n, bool cut) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  if (std::size_t nl = text.find('\n'); cut && nl != std::string::npos && nl + 1 < text.size()) start = nl + 1;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(n));
  return lines;
}

void ReportFailure(p::SchedulerClient& client, p::JobId job, const p::WorkerEnd& end, const std::string& more) {
  p::JobLogs m;
  m.job = job;
  m.rank = end.rank;
  m.worker = end.worker;
  m.stream = "stderr";
  m.max_bytes = kTailBytes;
  auto chunk = client.Call<p::LogChunk>(m, kCallTimeout);
  if (chunk.ok() && chunk->size > static_cast<std::int64_t>(chunk->data.data.size())) {
    m.offset = chunk->size - kTailBytes;
    chunk = client.Call<p::LogChunk>(m, kCallTimeout);
  }
  std::string who = end.Who();
  if (!chunk.ok()) {
    std::cerr << kProg << ": the stderr of " << who << " could not be read: " << chunk.status().ToString() << "\n";
  } else {
    std::string text(chunk->data.data.begin(), chunk->data.data.end());
    auto lines = LastLines(text, kTailLines, chunk->offset > 0);
    if (lines.empty()) {
      std::cerr << kProg << ": the stderr of " << who << " is empty\n";
    } else {
      std::cerr << kProg << ": the stderr of " << who << ", last " << lines.size() << " line"
                << (lines.size() == 1 ? "" : "s") << ":\n";
      for (const auto& l : lines) std::cerr << "  " << l << "\n";
    }
  }
  std::cerr << kProg << ": all of it: " << more << "\n";
}

void Tail::Follow(const std::string& path) {
  if (path == path_) return;
  path_ = path;
  offset_ = 0;
}

void Tail::Pump(std::ostream& out) {
  if (path_.empty()) return;
  std::ifstream in(path_);
  if (!in) return;
  in.seekg(offset_);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;
    out << line << "\n";
    offset_ = in.tellg();
  }
  out.flush();
}

}  // namespace aryl::cli
