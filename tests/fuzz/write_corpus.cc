// Writes one valid frame per message type into the directory given as argv[1]
// (the seed corpus of fuzz_decode). Malformed seeds are kept by hand in the repo.
#include <fstream>
#include <iostream>

#include "samples.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_write_corpus DIR\n";
    return 2;
  }
  for (const auto& m : aryl::protocol::testing::SampleMessages()) {
    std::string path = std::string(argv[1]) + "/valid_" + std::string(aryl::protocol::TypeName(m));
    std::ofstream(path, std::ios::binary) << aryl::protocol::Encode(m);
  }
  return 0;
}
