// Deterministic randomness for the simulator.
//
// Byte-identical output for the same inputs and seed must not depend on the
// standard library's distributions (their algorithms are implementation-defined),
// so everything random here is built on SplitMix64 and explicit transforms.
// Thread safety: a Rng is a value; use one per thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "aryl/hash.h"

namespace aryl::sim {

// SplitMix64 finalizer: a bijective 64-bit mix.
constexpr std::uint64_t Mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// FNV-1a over the bytes, then mixed with `seed`: a stable hash of a name.
inline std::uint64_t HashName(std::string_view s, std::uint64_t seed = 0) {
  return Mix64(Fnv1a64(s) ^ Mix64(seed));
}

// Uniform double in [0, 1) from 53 random bits.
inline double ToUnit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return Mix64(state_ - 0x9e3779b97f4a7c15ULL);
  }
  double Uniform() { return ToUnit(Next()); }
  // Standard normal by Box-Muller (one value per call; deterministic).
  double Normal() {
    double u1 = Uniform();
    double u2 = Uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace aryl::sim
