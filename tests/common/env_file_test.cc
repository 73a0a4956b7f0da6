#include "aryl/env_file.h"

#include <gtest/gtest.h>

namespace aryl {
namespace {

using Env = std::map<std::string, std::string>;

TEST(EnvFileTest, KeyValueLinesCommentsQuotesAndExport) {
  // The forms an sbatch/docker env file uses; the last assignment wins.
  auto env = ParseEnvFile(
      "# training settings\n"
      "\n"
      "OMP_NUM_THREADS=2\n"
      "  export  LR = 0.1 \r\n"
      "MSG=\"hello world\"\n"
      "SINGLE='a=b # not a comment'\n"
      "EMPTY=\n"
      "OMP_NUM_THREADS=4",
      "train.env");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(*env, (Env{{"OMP_NUM_THREADS", "4"},
                       {"LR", "0.1"},
                       {"MSG", "hello world"},
                       {"SINGLE", "a=b # not a comment"},
                       {"EMPTY", ""}}));
}

TEST(EnvFileTest, ErrorsNameFileAndLine) {
  // Each bad line is refused with file:line and what is wrong.
  struct Case {
    const char* text;
    const char* needle;
  };
  for (const Case& c : {Case{"A=1\nnot an assignment\n", "job.env:2: expected KEY=VALUE, got 'not an assignment'"},
                        Case{"# c\n\n1X=2\n", "job.env:3: '1X' is not a variable name"},
                        Case{"=value\n", "job.env:1: '' is not a variable name"},
                        Case{"MY-VAR=1\n", "job.env:1: 'MY-VAR' is not a variable name"},
                        Case{"Q=\"open\n", "job.env:1: unterminated quote in the value of Q"}}) {
    auto env = ParseEnvFile(c.text, "job.env");
    ASSERT_FALSE(env.ok()) << c.text;
    EXPECT_TRUE(env.status().IsInvalidArgument()) << env.status();
    EXPECT_NE(env.status().message().find(c.needle), std::string::npos) << env.status();
  }
}

TEST(EnvFileTest, MissingFileIsNotFound) {
  // A file that cannot be read is named.
  auto env = ReadEnvFile("/nonexistent/dir/job.env");
  ASSERT_FALSE(env.ok());
  EXPECT_TRUE(env.status().IsNotFound()) << env.status();
  EXPECT_NE(env.status().message().find("/nonexistent/dir/job.env"), std::string::npos);
}

}  // namespace
}  // namespace aryl
