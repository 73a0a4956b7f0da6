// ParseFlagsOrExit: the boolean spellings every binary accepts, and the
// mistakes that must be errors rather than silently ignored.
#include "aryl/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace aryl {
namespace {

// Each parse registers a logger named after the program: one name per parse.
cxxopts::Options MakeOptions() {
  static int count = 0;
  cxxopts::Options o("flagtool" + std::to_string(++count), "test");
  o.add_options()
      ("b,verbose", "a boolean", cxxopts::value<bool>()->default_value("true"))
      ("quiet", "a boolean, default false", cxxopts::value<bool>()->default_value("false"))
      ("count", "an int", cxxopts::value<int>()->default_value("1"));
  return o;
}

cxxopts::ParseResult Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "flagtool");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  cxxopts::Options o = MakeOptions();
  return ParseFlagsOrExit(o, static_cast<int>(argv.size()), argv.data());
}

TEST(FlagsTest, BooleanSpellings) {
  // Every spelling of true and false, and the default.
  EXPECT_TRUE(Parse({})["verbose"].as<bool>());
  EXPECT_FALSE(Parse({})["quiet"].as<bool>());
  EXPECT_TRUE(Parse({"--quiet"})["quiet"].as<bool>());
  EXPECT_FALSE(Parse({"--verbose=false"})["verbose"].as<bool>());
  EXPECT_TRUE(Parse({"--quiet=true"})["quiet"].as<bool>());
  EXPECT_FALSE(Parse({"--no-verbose"})["verbose"].as<bool>());
  EXPECT_FALSE(Parse({"--verbose", "false"})["verbose"].as<bool>());
  EXPECT_TRUE(Parse({"--quiet", "true"})["quiet"].as<bool>());
  EXPECT_FALSE(Parse({"-b", "false"})["verbose"].as<bool>());
  EXPECT_FALSE(Parse({"--verbose", "no"})["verbose"].as<bool>());
}

TEST(FlagsTest, FalseIsNotGiven) {
  // Programs that read a default-false boolean with count() see `=false` as unset.
  EXPECT_EQ(Parse({"--quiet=false"}).count("quiet"), 0u);
  EXPECT_EQ(Parse({"--quiet", "false"}).count("quiet"), 0u);
  EXPECT_EQ(Parse({"--no-quiet"}).count("quiet"), 0u);
  EXPECT_EQ(Parse({"--quiet"}).count("quiet"), 1u);
}

TEST(FlagsTest, ValueAfterBooleanDoesNotSwallowTheNextFlag) {
  // `--verbose false --count 3`: both flags are read.
  auto r = Parse({"--verbose", "false", "--count", "3"});
  EXPECT_FALSE(r["verbose"].as<bool>());
  EXPECT_EQ(r["count"].as<int>(), 3);
  auto q = Parse({"--quiet", "--count", "4"});
  EXPECT_TRUE(q["quiet"].as<bool>());
  EXPECT_EQ(q["count"].as<int>(), 4);
}

TEST(FlagsTest, ArgumentsAfterDoubleDashAreKept) {
  // A command after "--" is the program's, even words that look like values.
  auto r = Parse({"--quiet", "--", "train.py", "false", "--no-verbose"});
  EXPECT_TRUE(r["quiet"].as<bool>());
  EXPECT_TRUE(r["verbose"].as<bool>());
  EXPECT_EQ(r.unmatched(), (std::vector<std::string>{"train.py", "false", "--no-verbose"}));
}

TEST(FlagsDeathTest, StrayPositionalIsAnError) {
  EXPECT_EXIT(Parse({"--count", "2", "extra"}), ::testing::ExitedWithCode(2),
              "flagtool[0-9]*: error: unexpected argument 'extra'");
  EXPECT_EXIT(Parse({"stray", "--", "cmd"}), ::testing::ExitedWithCode(2), "unexpected argument 'stray'");
}

TEST(FlagsDeathTest, BadBooleanValueIsAnError) {
  EXPECT_EXIT(Parse({"--verbose=maybe"}), ::testing::ExitedWithCode(2), "flagtool[0-9]*: error: .*maybe");
  EXPECT_EXIT(Parse({"--no-count"}), ::testing::ExitedWithCode(2), "flagtool[0-9]*: error: .*no-count");
}

}  // namespace
}  // namespace aryl
