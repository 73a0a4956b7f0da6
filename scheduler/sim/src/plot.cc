// WritePlots (report.h): gnuplot figures of the simulator's runs.
//
// timeline.png has one panel per measure (GPUs busy with training, queued
// jobs, training's use of loaned GPUs), the x axes aligned, the capacity drawn
// as a black line and one legend outside the data, right of the panels. The
// policies differ by dash pattern and point shape as well as by colour (a
// dark-to-light ramp), so seven of them stay apart in a grey-scale print.
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

std::string LineStyle(std::size_t i) {
  const Style& s = kStyles[i % std::size(kStyles)];
  // Beyond seven policies the styles repeat with a heavier line.
  double width = 2.0 + static_cast<double>(i / std::size(kStyles));
  std::ostringstream os;
  os << "lc rgb '" << s.colour << "' dt " << s.dash << " pt " << s.point << " lw " << width;
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
  // Markers every ~25 samples tell the dashes apart even where lines overlap.
  std::size_t samples = runs.empty() ? 0 : runs.front().timeline.size();
  std::size_t every = std::max<std::size_t>(1, samples / 25);
  auto series = [&](std::size_t i, const std::string& file, const std::string& column, bool title) {
    std::ostringstream os;
    os << Quoted(file) << " using 1:" << column << " with linespoints " << LineStyle(i) << " pi " << every << " ps 0.8 "
       << (title ? "title " + Quoted(runs[i].metrics.policy) : std::string("notitle"));
    return os.str();
  };
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1500,1300 font 'DejaVu Sans,12' noenhanced\n"
     << "set output 'timeline.png'\n"
     << "set multiplot layout 3,1 title "
     << Quoted("aryl-sim timeline: " + std::to_string(training_gpus) + " training GPUs, " +
               std::to_string(inference_gpus) + " inference GPUs")
     << "\n"
     // Fixed margins align the panels; the legend sits right of the data.
     << "set lmargin at screen 0.08\nset rmargin at screen 0.80\n"
     << "set key outside right top vertical Left reverse samplen 4 spacing 1.2 box opaque\n"
     << "set grid lc rgb '#d0d0d0'\nset xlabel 'day'\nset yrange [0:*]\n";
  // Panel 1: GPUs busy with training, against the training capacity.
  gp << "set title 'GPUs busy with training (own + loaned)'\nset ylabel 'GPUs'\nplot " << training_gpus
     << " with lines lc rgb 'black' lw 3 title 'training capacity (own GPUs)'";
  for (std::size_t i = 0; i < runs.size(); ++i)
    gp << ", " << series(i, "timeline-" + SafeName(runs[i].metrics.policy) + ".dat", "($4+$5)", true);
  gp << "\n";
  // Panel 2: queued jobs.
  gp << "set title 'queued jobs'\nset ylabel 'jobs'\nplot ";
  for (std::size_t i = 0; i < runs.size(); ++i)
    gp << (i ? ", " : "") << series(i, "timeline-" + SafeName(runs[i].metrics.policy) + ".dat", "2", true);
  if (runs.empty()) gp << "0 notitle";
  gp << "\n";
  // Panel 3: the loaned capacity (the same for every policy: the demand decides
  // it) as a line, and how much of it each policy's training uses.
  gp << "set title 'inference GPUs loaned to training, and training use of them'\nset ylabel 'GPUs'\nplot ";
  if (!runs.empty()) {
    std::string first = Quoted("timeline-" + SafeName(runs.front().metrics.policy) + ".dat");
    gp << first << " using 1:($6*" << per_server << ") with steps lc rgb 'black' lw 3 title 'loaned capacity'";
    for (std::size_t i = 0; i < runs.size(); ++i)
      gp << ", " << series(i, "timeline-" + SafeName(runs[i].metrics.policy) + ".dat", "5", true);
  } else {
    gp << "0 notitle";
  }
  gp << "\nunset multiplot\n";
  // JCT CDF, legend outside.
  gp << "set terminal pngcairo size 1300,800 font 'DejaVu Sans,12' noenhanced\n"
     << "set output 'jct_cdf.png'\nset lmargin at screen 0.08\nset rmargin at screen 0.78\n"
     << "set title 'job completion time CDF'\nset logscale x\nset xlabel 'job completion time (hours, log scale)'\n"
     << "set ylabel 'fraction of jobs'\nset yrange [0:1]\n"
     << "set key outside right top vertical Left reverse samplen 4 spacing 1.2 box opaque\nplot ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    gp << (i ? ", " : "") << Quoted("jct-" + SafeName(runs[i].metrics.policy) + ".dat")
       << " using 1:2 with linespoints " << LineStyle(i) << " pi 200 ps 0.8 title " << Quoted(runs[i].metrics.policy);
  }
  if (runs.empty()) gp << "0 notitle";
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
