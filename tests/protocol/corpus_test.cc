// Replays the fuzz seed corpus through Decode in every build (no clang needed):
// valid_* frames decode and re-encode identically, bad_* frames are refused with a
// reason, and nothing throws or crashes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "aryl/protocol/messages.h"

#ifndef ARYL_FUZZ_CORPUS_DIR
#error "ARYL_FUZZ_CORPUS_DIR must name tests/fuzz/corpus/decode"
#endif

namespace aryl::protocol {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Corpus, SeedsDecodeAsLabelled) {
  int valid = 0, bad = 0;
  for (const auto& entry : fs::directory_iterator(ARYL_FUZZ_CORPUS_DIR)) {
    std::string name = entry.path().filename().string();
    std::string frame = Read(entry.path());
    auto r = Decode(frame);
    if (name.rfind("valid_", 0) == 0) {
      ++valid;
      ASSERT_TRUE(r.ok()) << name << ": " << r.status();
      EXPECT_EQ(name, "valid_" + std::string(TypeName(*r)));
      EXPECT_EQ(Encode(*r), frame) << name;
    } else if (name.rfind("bad_", 0) == 0) {
      ++bad;
      EXPECT_FALSE(r.ok()) << name;
      if (!r.ok()) {
        EXPECT_FALSE(r.status().message().empty()) << name;
      }
    }
  }
  EXPECT_EQ(valid, int(AllTypeNames().size()));
  EXPECT_GE(bad, 5);
}

}  // namespace
}  // namespace aryl::protocol
