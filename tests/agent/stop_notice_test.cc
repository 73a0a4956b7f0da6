// StopNotices (stop_notice.h): the file ARYL_STOP_NOTICE names.
#include "stop_notice.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace aryl::agent {
namespace {

namespace fs = std::filesystem;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

unsigned Mode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 07777;
}

// The directory is reachable but not listable; a notice is one JSON line,
// private to its worker; a worker's notice moves only to an earlier deadline until it is
// removed; removing a notice that was never written is harmless.
TEST(StopNotices, WrittenOnceReadableRemoved) {
  const fs::path dir = fs::temp_directory_path() / ("aryl-notices-" + std::to_string(::getpid())) / "notices";
  fs::remove_all(dir.parent_path());
  StopNotices notices(dir);
  ASSERT_TRUE(notices.Prepare().ok());
  ASSERT_TRUE(notices.Prepare().ok());
  EXPECT_EQ(Mode(dir.string()), 0711u);
  const std::string path = notices.PathOf(7, 3);
  EXPECT_EQ(path, (dir / "job-7-worker-3").string());
  EXPECT_FALSE(fs::exists(path));

  StopNotice n{.job = 7, .worker = 3, .deadline = 1800000000.25, .grace_seconds = 30, .reason = "preempted: \"x\""};
  ASSERT_TRUE(notices.Write(n, std::nullopt).ok());
  const std::string text = Read(path);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line";
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["deadline"].get<double>(), 1800000000.25);
  EXPECT_EQ(j["grace_seconds"].get<double>(), 30);
  EXPECT_EQ(j["reason"].get<std::string>(), "preempted: \"x\"");
  EXPECT_EQ(j["job"].get<int>(), 7);
  EXPECT_EQ(j["worker"].get<int>(), 3);
  EXPECT_EQ(Mode(path), 0600u);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  StopNotice later = n;
  later.deadline += 100;
  ASSERT_TRUE(notices.Write(later, std::nullopt).ok());
  EXPECT_EQ(Read(path), text) << "a second stop with a later deadline moved it";
  // An earlier deadline (a lease's stop during a long grace) is written: the
  // SIGKILL comes then (ProcessLauncher::RequestStop).
  StopNotice sooner = n;
  sooner.deadline -= 20;
  sooner.grace_seconds = 5;
  ASSERT_TRUE(notices.Write(sooner, std::nullopt).ok());
  EXPECT_EQ(nlohmann::json::parse(Read(path))["deadline"].get<double>(), 1800000000.25 - 20);

  notices.Remove(7, 3);
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(notices.Write(later, std::nullopt).ok());
  EXPECT_EQ(nlohmann::json::parse(Read(path))["deadline"].get<double>(), 1800000000.25 + 100)
      << "a worker id started again gets a fresh notice";
  notices.Remove(9, 9);
  fs::remove_all(dir.parent_path());
}

// A notice that cannot be written says which file and why.
TEST(StopNotices, WriteErrorNamesTheFile) {
  StopNotices notices("/nonexistent-aryl-dir/notices");
  auto st = notices.Write(StopNotice{.job = 1, .worker = 2}, std::nullopt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("/nonexistent-aryl-dir/notices/job-1-worker-2"), std::string::npos) << st;
}

}  // namespace
}  // namespace aryl::agent
