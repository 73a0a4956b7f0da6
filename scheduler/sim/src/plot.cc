// WritePlots (report.h): gnuplot figures of the simulator's runs.
//
// timeline.png has one panel per measure (GPUs busy with training, queued
// jobs, training's use of loaned GPUs), the x axes aligned, the capacities
// shaded (never a line a run could be taken for), headroom above each
// panel's peak, and one legend outside the data, right of the panels. The
// policies differ by dash pattern and point shape as well as by colour (a
// dark-to-light ramp), so seven of them stay apart in a grey-scale print.
// Policies whose lines coincide in a panel (elastic-only, optimus and afs
// often do) are drawn thick to thin in plot order, so each lower line shows
// as a rim around the ones above it; every policy's markers sit at its own
// offset, drawn above all lines; and the panel's legend names the group.
//
// gnuplot runs by fork/exec (no shell): its working directory is the output
// directory and its standard input is plots.gp, which stays there for reruns.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "aryl/sim/report.h"

namespace aryl::sim {
namespace {

constexpr double kHour = 3600.0;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string SafeName(const std::string& policy) {
  std::string s = policy;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  return s;
}

// A gnuplot single-quoted string: '' stands for one quote.
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Seven styles, dark to light (ColorBrewer-like), each with its own dash and point.
struct Style {
  const char* colour;
  int dash;
  int point;
};
constexpr Style kStyles[] = {
    {"#000000", 1, 7}, {"#1b4f8a", 2, 5}, {"#b2182b", 3, 9}, {"#1a7a3a", 4, 11},
    {"#7b3294", 5, 13}, {"#c06a00", 6, 4}, {"#7f7f7f", 7, 6},
};

// Capacities (what runs are measured against) are shaded areas, never lines:
// no run's line can be mistaken for them.
constexpr const char* kCapacityFill = "#a0a0a0";

// Beyond seven policies the styles repeat with a heavier line.
double LineWidth(std::size_t i) { return 2.0 + static_cast<double>(i / std::size(kStyles)); }

// What the run's line, its markers and its legend sample are drawn with.
enum class Part { kLine, kPoints, kBoth };

std::string LineStyle(std::size_t i, double width, Part part = Part::kBoth) {
  const Style& s = kStyles[i % std::size(kStyles)];
  std::ostringstream os;
  os << "lc rgb '" << s.colour << "'";
  if (part != Part::kPoints) os << " dt " << s.dash << " lw " << width;
  if (part != Part::kLine) os << " pt " << s.point;
  return os.str();
}

// One panel's measure of a timeline sample.
using Measure = double (*)(const TimelineSample&);

// How one timeline panel draws each run: its line width, and the legend
// lines that name the runs whose lines coincide there.
struct PanelLayout {
  std::vector<double> width;
  std::vector<std::string> note;
};

// Two runs' lines coincide in a panel when their mean distance over the
// samples (a run that has ended counts as 0) is at most 1% of the panel's
// peak: at the figure's height they are one line. Groups are closed
// transitively; within a group the first in plot order is drawn thickest.
PanelLayout Layout(const std::vector<RunResult>& runs, Measure measure) {
  const std::size_t n = runs.size();
  PanelLayout out;
  for (std::size_t i = 0; i < n; ++i) out.width.push_back(LineWidth(i));
  std::size_t samples = 0;
  double peak = 0;
  for (const auto& r : runs) {
    samples = std::max(samples, r.timeline.size());
    for (const auto& s : r.timeline) peak = std::max(peak, measure(s));
  }
  if (n < 2 || samples == 0) return out;
  auto value = [&](std::size_t i, std::size_t k) {
    return k < runs[i].timeline.size() ? measure(runs[i].timeline[k]) : 0.0;
  };
  std::vector<std::size_t> group(n);
  for (std::size_t i = 0; i < n; ++i) group[i] = i;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      double distance = 0;
      for (std::size_t k = 0; k < samples; ++k) distance += std::abs(value(i, k) - value(j, k));
      if (distance / static_cast<double>(samples) > 0.01 * std::max(peak, 1.0)) continue;
      const std::size_t from = group[j], to = group[i];
      for (auto& g : group) if (g == from) g = to;
    }
  }
  for (std::size_t first = 0; first < n; ++first) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < n; ++i) if (group[i] == first) members.push_back(i);
    if (members.size() < 2) continue;
    // 1.5 wider a step, at most 4 wider in all.
    const double step = std::min(1.5, 4.0 / static_cast<double>(members.size() - 1));
    for (std::size_t p = 0; p < members.size(); ++p)
      out.width[members[p]] = LineWidth(members[p]) + step * static_cast<double>(members.size() - 1 - p);
    // The legend is narrow: the names go a few to a line.
    std::string line = "coincide (thick to thin):";
    for (std::size_t p = 0; p < members.size(); ++p) {
      const std::string name = runs[members[p]].metrics.policy + (p + 1 < members.size() ? "," : "");
      if (line.size() + 1 + name.size() > 30) {
        out.note.push_back(line);
        line = "  " + name;
      } else {
        line += " " + name;
      }
    }
    out.note.push_back(line);
  }
  return out;
}

// Every run's curve from <prefix><policy>.dat, each item after ", ": all the
// lines first (thick to thin where they coincide), then each run's markers,
// every `every` points from its own offset, above all lines; then the
// legend: a line-and-marker sample per run and the layout's note.
std::string Curves(const std::vector<RunResult>& runs, const std::string& prefix, const std::string& columns,
                   const PanelLayout& layout, std::size_t every) {
  std::ostringstream os;
  auto file = [&](std::size_t i) { return Quoted(prefix + SafeName(runs[i].metrics.policy) + ".dat"); };
  for (std::size_t i = 0; i < runs.size(); ++i)
    os << ", " << file(i) << " using " << columns << " with lines " << LineStyle(i, layout.width[i], Part::kLine)
       << " notitle";
  for (std::size_t i = 0; i < runs.size(); ++i)
    os << ", " << file(i) << " using " << columns << " every " << every << "::" << i * every / runs.size()
       << " with points " << LineStyle(i, 0, Part::kPoints) << " ps 0.8 notitle";
  for (std::size_t i = 0; i < runs.size(); ++i)
    os << ", keyentry with linespoints " << LineStyle(i, layout.width[i]) << " ps 0.8 title "
       << Quoted(runs[i].metrics.policy);
  for (const auto& line : layout.note) os << ", keyentry with lines lc rgb '#ffffff' title " << Quoted(line);
  return os.str();
}

// fork/exec gnuplot in `dir` with stdin from `script` and stderr to gnuplot.log;
// kills it after `timeout_s`.
Status RunGnuplot(const std::string& dir, const std::string& script, double timeout_s) {
  int in = ::open(script.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::IoError("--plot: cannot open '" + script + "': " + std::strerror(errno));
  std::string log = dir + "/gnuplot.log";
  int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err < 0) {
    ::close(in);
    return Status::IoError("--plot: cannot write '" + log + "': " + std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(in);
    ::close(err);
    return Status::IoError(std::string("--plot: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::dup2(in, STDIN_FILENO);
    ::dup2(err, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    char* const argv[] = {const_cast<char*>("gnuplot"), nullptr};
    ::execvp("gnuplot", argv);
    ::_exit(127);
  }
  ::close(in);
  ::close(err);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int st = 0;
  while (true) {
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return Status::IoError(std::string("--plot: waitpid: ") + std::strerror(errno));
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return Status::Timeout("--plot: gnuplot still running after " + Fmt("%.0f", timeout_s) + " s; killed (see " +
                             log + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
    return Status::Unavailable("--plot: gnuplot not found in PATH (Debian: gnuplot-nox)");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string why = WIFEXITED(st) ? "exit " + std::to_string(WEXITSTATUS(st)) : "signal " + std::to_string(WTERMSIG(st));
    return Status::Unavailable("--plot: gnuplot failed (" + why + "; see " + log + ")");
  }
  return Status::Ok();
}

}  // namespace

Status WritePlots(const std::string& dir, const std::vector<RunResult>& runs, int training_gpus,
                  int inference_servers, int inference_gpus) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("--plot: cannot create '" + dir + "': " + ec.message());
  double t0 = 0;
  bool have_t0 = false;
  for (const auto& r : runs) {
    if (!r.timeline.empty() && (!have_t0 || r.timeline.front().time < t0)) {
      t0 = r.timeline.front().time;
      have_t0 = true;
    }
  }
  for (const auto& r : runs) {
    std::string name = SafeName(r.metrics.policy);
    std::ofstream tl(dir + "/timeline-" + name + ".dat");
    tl << "# day queued running busy_training_gpus busy_loaned_gpus loaned_servers demand_servers\n";
    for (const auto& s : r.timeline) {
      tl << Fmt("%.5f", (s.time - t0) / 86400.0) << ' ' << s.queued_jobs << ' ' << s.running_jobs << ' '
         << s.busy_training_gpus << ' ' << s.busy_loaned_gpus << ' ' << s.loaned_servers << ' '
         << s.demand_servers << '\n';
    }
    std::ofstream jct(dir + "/jct-" + name + ".dat");
    jct << "# jct_hours cumulative_fraction\n";
    std::size_t n = r.jcts.size();
    // At most ~2000 points per curve keeps the files small and the plot identical.
    std::size_t stride = std::max<std::size_t>(1, n / 2000);
    for (std::size_t i = 0; i < n; i += stride)
      jct << Fmt("%.6g", std::max(r.jcts[i], 1.0) / kHour) << ' ' << Fmt("%.6f", (i + 1.0) / n) << '\n';
    if (n > 0) jct << Fmt("%.6g", std::max(r.jcts.back(), 1.0) / kHour) << " 1\n";
    if (!tl || !jct) return Status::IoError("--plot: error writing data files in '" + dir + "'");
  }
  const double per_server = inference_servers > 0 ? static_cast<double>(inference_gpus) / inference_servers : 0;
  // Markers every ~25 samples (~10 on a CDF) tell the dashes apart; each
  // run's start at its own offset, so coinciding lines still show every run's
  // markers.
  std::size_t samples = SIZE_MAX, jct_points = SIZE_MAX;
  for (const auto& r : runs) {
    samples = std::min(samples, r.timeline.size());
    jct_points = std::min(jct_points, r.jcts.size() / std::max<std::size_t>(1, r.jcts.size() / 2000));
  }
  const std::size_t every = runs.empty() ? 1 : std::max<std::size_t>(1, samples / 25);
  auto panel = [&](const std::string& column, Measure measure) {
    return Curves(runs, "timeline-", "1:" + column, Layout(runs, measure), every);
  };
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1500,1300 font 'DejaVu Sans,12' noenhanced\n"
     << "set output 'timeline.png'\n"
     << "set multiplot layout 3,1 title "
     << Quoted("aryl-sim timeline: " + std::to_string(training_gpus) + " training GPUs, " +
               std::to_string(inference_gpus) + " inference GPUs")
     << "\n"
     // Fixed margins align the panels; the legend sits right of the data, in
     // a margin wide enough for its longest line.
     << "set lmargin at screen 0.07\nset rmargin at screen 0.75\n"
     << "set key outside right top vertical Left reverse samplen 4 spacing 1.2 box opaque\n"
     // 8% headroom above each panel's peak, so that no run's peak lies on
     // the frame.
     << "set grid lc rgb '#d0d0d0'\nset xlabel 'day'\nset yrange [0:*]\nset offsets 0, 0, graph 0.08, 0\n";
  // Panel 1: GPUs busy with training, against the training capacity.
  gp << "set title 'GPUs busy with training (own + loaned)'\nset ylabel 'GPUs'\nplot " << training_gpus
     << " with filledcurves x1 fs transparent solid 0.5 noborder fc rgb '" << kCapacityFill
     << "' title 'own GPUs (shaded)'"
     << panel("($4+$5)", [](const TimelineSample& s) { return double(s.busy_training_gpus + s.busy_loaned_gpus); })
     << "\n";
  // Panel 2: queued jobs.
  gp << "set title 'queued jobs'\nset ylabel 'jobs'\nplot ";
  if (runs.empty()) gp << "0 notitle";
  else gp << panel("2", [](const TimelineSample& s) { return double(s.queued_jobs); }).substr(2);
  gp << "\n";
  // Panel 3: the loaned capacity (the same for every policy: the demand decides
  // it) as a line, and how much of it each policy's training uses.
  gp << "set title 'inference GPUs loaned to training, and training use of them'\nset ylabel 'GPUs'\nplot ";
  if (!runs.empty()) {
    std::string first = Quoted("timeline-" + SafeName(runs.front().metrics.policy) + ".dat");
    gp << first << " using 1:($6*" << per_server << ") with fillsteps fs transparent solid 0.5 noborder fc rgb '" << kCapacityFill
       << "' title 'loaned capacity (shaded)'"
       << panel("5", [](const TimelineSample& s) { return double(s.busy_loaned_gpus); });
  } else {
    gp << "0 notitle";
  }
  gp << "\nunset multiplot\n";
  // JCT CDF, legend outside.
  gp << "set terminal pngcairo size 1300,800 font 'DejaVu Sans,12' noenhanced\n"
     << "set output 'jct_cdf.png'\nset offsets 0, 0, 0, 0\nset lmargin at screen 0.08\nset rmargin at screen 0.78\n"
     << "set title 'job completion time CDF'\nset logscale x\nset xlabel 'job completion time (hours, log scale)'\n"
     << "set ylabel 'fraction of jobs'\nset yrange [0:1]\n"
     << "set key outside right top vertical Left reverse samplen 4 spacing 1.2 box opaque\nplot ";
  PanelLayout jct;
  for (std::size_t i = 0; i < runs.size(); ++i) jct.width.push_back(LineWidth(i));
  if (runs.empty()) gp << "0 notitle";
  else gp << Curves(runs, "jct-", "1:2", jct, std::max<std::size_t>(1, jct_points / 10)).substr(2);
  gp << "\n";
  const std::string script = dir + "/plots.gp";
  {
    std::ofstream out(script);
    out << gp.str();
    if (!out) return Status::IoError("--plot: error writing '" + script + "'");
  }
  return RunGnuplot(dir, script, 120);
}

}  // namespace aryl::sim
