// CSV input per RFC 4180 (trace and demand files) and the gnuplot figures
// made without a shell.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "aryl/sim/demand.h"
#include "aryl/sim/report.h"
#include "aryl/sim/trace.h"

namespace aryl::sim {
namespace {

namespace fs = std::filesystem;

TEST(CsvTest, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  // "j,1" is one job id; "" is one quote; a quoted field may span lines.
  auto t = ParseTrace(
      "job_id,submission_time,duration,num_gpu,model\n"
      "\"j,1\",10,100,2,resnet\n"
      "\"say \"\"hi\"\"\", 20 ,100,1,\" bert \"\n"
      "\"multi\nline\",30,100,1,\"a,b\"\n"
      "plain,40,100,1,gpt\n",
      "t.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->jobs.size(), 4u);
  EXPECT_EQ(t->jobs[0].name, "j,1");
  EXPECT_EQ(t->jobs[1].name, "say \"hi\"");
  EXPECT_EQ(t->jobs[1].model, " bert ");  // quoted: spaces kept
  EXPECT_EQ(t->jobs[2].name, "multi\nline");
  EXPECT_EQ(t->jobs[2].model, "a,b");
  // Line numbers still point at the record's first line after a multi-line field.
  EXPECT_EQ(t->jobs[2].source, "t.csv:4");
  EXPECT_EQ(t->jobs[3].source, "t.csv:6");
}

TEST(CsvTest, BadQuotingIsAnErrorWithFileAndLine) {
  const std::string header = "job_id,submission_time,duration,num_gpu\n";
  auto open = ParseTrace(header + "a,1,1,1\n\"never closed,1,1,1\n", "t.csv");
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("t.csv:3: column 1: the quote opened"), std::string::npos) << open.status();
  auto after = ParseTrace(header + "\"a\"x,1,1,1\n", "t.csv");
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("t.csv:2: column 1: text after the closing quote"), std::string::npos)
      << after.status();
  auto inner = ParseTrace(header + "a\"b,1,1,1\n", "t.csv");
  ASSERT_FALSE(inner.ok());
  EXPECT_NE(inner.status().message().find("t.csv:2: column 1: a quote inside an unquoted field"), std::string::npos)
      << inner.status();
  // A '"' in a comment line does not open a field.
  auto comment = ParseTrace("# a \"comment\n" + header + "a,1,1,1\n", "t.csv");
  ASSERT_TRUE(comment.ok()) << comment.status();
  EXPECT_EQ(comment->jobs.size(), 1u);
}

TEST(CsvTest, DemandCsvAcceptsQuotedNumbers) {
  auto d = ParseDemandCsv("\"time_s\",\"servers\"\n0,\"3\"\n\"60\",4\n", "d.csv", 8);
  ASSERT_TRUE(d.ok()) << d.status();
  auto bad = ParseDemandCsv("time_s,servers\n0,\"3\n", "d.csv", 8);
  EXPECT_FALSE(bad.ok());
}

// Seven policies plotted into a directory whose name has a quote, a space and
// a '$': gnuplot runs by fork/exec with the script on stdin, no shell involved.
TEST(PlotTest, SevenPoliciesIntoAnAwkwardDirectory) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed (gnuplot-nox)";
  fs::path dir = fs::temp_directory_path() / ("aryl plot 'it's $HOME' " + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<RunResult> runs;
  const char* names[] = {"aryl", "baseline", "loan-only", "elastic-only", "optimus", "afs", "tiresias"};
  for (int p = 0; p < 7; ++p) {
    RunResult r;
    r.metrics.policy = names[p];
    for (int i = 0; i < 50; ++i) {
      TimelineSample s;
      s.time = i * 600.0;
      s.queued_jobs = (i * (p + 1)) % 9;
      s.running_jobs = 3;
      s.busy_training_gpus = 10 + (i + p) % 6;
      s.busy_loaned_gpus = (i * p) % 5;
      s.loaned_servers = i % 4;
      s.demand_servers = 4 - i % 4;
      r.timeline.push_back(s);
    }
    for (int j = 1; j <= 40; ++j) r.jcts.push_back(j * 900.0 * (p + 1));
    runs.push_back(r);
  }
  Status st = WritePlots(dir.string(), runs, 16, 8, 8);
  ASSERT_TRUE(st.ok()) << st;
  for (const char* png : {"timeline.png", "jct_cdf.png"}) {
    ASSERT_TRUE(fs::exists(dir / png)) << png;
    EXPECT_GT(fs::file_size(dir / png), 10000u) << png;
    std::ifstream in(dir / png, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  }
  // The script names every policy once per panel with a legend outside the data and a capacity line.
  std::ifstream gp(dir / "plots.gp");
  std::stringstream ss;
  ss << gp.rdbuf();
  std::string script = ss.str();
  EXPECT_NE(script.find("set key outside right"), std::string::npos);
  // Capacities are shaded areas, so no run's line (the first is black) can
  // look like one; each panel leaves headroom above its peak.
  EXPECT_NE(script.find("with filledcurves x1 fs transparent solid 0.5 noborder fc rgb '#a0a0a0' "
                        "title 'own GPUs (shaded)'"),
            std::string::npos) << script;
  EXPECT_NE(script.find("with fillsteps fs transparent solid 0.5 noborder fc rgb '#a0a0a0' title 'loaned capacity (shaded)'"),
            std::string::npos) << script;
  EXPECT_EQ(script.find("lc rgb 'black' lw 3"), std::string::npos) << "a capacity drawn as a line";
  EXPECT_NE(script.find("set offsets 0, 0, graph 0.08, 0"), std::string::npos);
  for (const char* n : names) EXPECT_NE(script.find(std::string("title '") + n + "'"), std::string::npos) << n;
  fs::remove_all(dir);
}

// Three policies with the same timeline and one apart: the three lines are
// drawn thick to thin (the first drawn thickest shows as a rim around the
// others), their markers at different offsets, and the legend names them;
// gnuplot takes the script without a warning.
TEST(PlotTest, CoincidingPoliciesDrawnThickToThinAndNamed) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed (gnuplot-nox)";
  fs::path dir = fs::temp_directory_path() / ("aryl-plot-coincide-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<RunResult> runs;
  for (const char* name : {"baseline", "elastic-only", "optimus", "afs"}) {
    const bool apart = runs.empty();
    RunResult r;
    r.metrics.policy = name;
    for (int i = 0; i < 100; ++i) {
      TimelineSample s;
      s.time = i * 600.0;
      s.queued_jobs = apart ? 40 + i % 7 : i % 5;
      s.busy_training_gpus = apart ? 2 : 12 + i % 4;
      s.busy_loaned_gpus = apart ? 6 : i % 2;
      s.loaned_servers = 1;
      r.timeline.push_back(s);
    }
    for (int j = 1; j <= 40; ++j) r.jcts.push_back(j * 900.0);
    runs.push_back(r);
  }
  Status st = WritePlots(dir.string(), runs, 16, 8, 8);
  ASSERT_TRUE(st.ok()) << st;
  std::ifstream gp(dir / "plots.gp");
  std::stringstream ss;
  ss << gp.rdbuf();
  const std::string script = ss.str();
  auto width = [&](const std::string& policy) {
    std::smatch m;
    std::regex re("'timeline-" + policy + R"(\.dat' using 1:2 with lines [^,]* lw ([0-9.]+) notitle)");
    return std::regex_search(script, m, re) ? std::stod(m[1]) : -1.0;
  };
  EXPECT_EQ(width("baseline"), 2.0) << script;
  EXPECT_EQ(width("elastic-only"), 5.0) << script;
  EXPECT_EQ(width("optimus"), 3.5) << script;
  EXPECT_EQ(width("afs"), 2.0) << script;
  EXPECT_NE(script.find("title 'coincide (thick to thin):'"), std::string::npos) << script;
  EXPECT_NE(script.find("title '  elastic-only, optimus, afs'"), std::string::npos) << script;
  EXPECT_EQ(script.find("baseline,"), std::string::npos) << "baseline lies apart";
  for (const char* every : {"every 4::0 ", "every 4::1 ", "every 4::2 ", "every 4::3 "})
    EXPECT_NE(script.find(every), std::string::npos) << every;
  std::ifstream log(dir / "gnuplot.log");
  std::stringstream warnings;
  warnings << log.rdbuf();
  EXPECT_EQ(warnings.str(), "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aryl::sim
