// FNV-1a, 64 bits: a fast, stable (same on every host and build) hash of a
// byte string, for checksums and for salts that several processes must derive
// alike. Not for anything an adversary chooses the input of.
#pragma once

#include <cstdint>
#include <string_view>

namespace aryl {

inline constexpr std::uint64_t kFnv1a64Offset = 0xCBF29CE484222325ull;

inline constexpr std::uint64_t Fnv1a64(std::string_view data, std::uint64_t h = kFnv1a64Offset) {
  for (unsigned char c : data) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace aryl
