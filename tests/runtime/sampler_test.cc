#include <gtest/gtest.h>

#include <map>
#include <set>

#include <torch/torch.h>

#include "aryl/elastic_sampler.h"
#include "aryl/sample_random.h"

namespace aryl {
namespace {

// Every sample of each epoch is consumed exactly once while the world size
// changes every few steps (including sizes that do not divide the batch).
TEST(ElasticSampler, ExactlyOncePerEpochAcrossResizes) {
  ElasticSampler sampler(103, 10, 5);
  const int worlds[] = {2, 4, 3, 1, 2, 5, 7};
  std::map<int64_t, std::multiset<int64_t>> seen;
  for (int step = 0; step < 60; ++step) {
    int world = worlds[(step / 4) % 7];
    int64_t global = 0;
    double weight_sum = 0;
    for (int r = 0; r < world; ++r) {
      auto b = sampler.Local(r, world);
      for (auto i : b.indices) seen[b.epoch].insert(i);
      global += int64_t(b.indices.size());
      weight_sum += b.weight;
      EXPECT_EQ(b.global_size, std::min<int64_t>(10, 103 - sampler.cursor()));
    }
    EXPECT_NEAR(weight_sum, 1.0, 1e-12);
    EXPECT_EQ(global, std::min<int64_t>(10, 103 - sampler.cursor()));
    sampler.Advance(world);
  }
  ASSERT_GE(seen.size(), 5u);
  for (auto& [epoch, s] : seen) {
    if (epoch == sampler.epoch()) continue;  // the current epoch is partial
    ASSERT_EQ(s.size(), 103u) << "epoch " << epoch;
    for (int64_t i = 0; i < 103; ++i) EXPECT_EQ(s.count(i), 1u) << "epoch " << epoch << " sample " << i;
  }
}

// The permutation depends only on (seed, epoch): a restored position replays the same samples.
TEST(ElasticSampler, PositionRestoresTheSameSamples) {
  ElasticSampler a(50, 8, 3), b(50, 8, 3);
  for (int i = 0; i < 9; ++i) a.Advance(2);
  b.SetPosition(a.epoch(), a.cursor());
  EXPECT_EQ(a.Local(1, 3).indices, b.Local(1, 3).indices);
  ElasticSampler c(50, 8, 4);
  c.SetPosition(a.epoch(), a.cursor());
  EXPECT_NE(a.Local(0, 1).indices, c.Local(0, 1).indices);
}

// Linear scaling: fixed local batch, global batch and learning rate grow with the world.
TEST(ElasticSampler, LinearScalingPolicy) {
  ElasticSampler s(1000, 16, 1, BatchPolicy::kLinearScaling, 2);
  EXPECT_EQ(s.GlobalBatch(4), 64);
  EXPECT_DOUBLE_EQ(s.LearningRateScale(4), 2.0);
  EXPECT_EQ(s.Local(3, 4).indices.size(), 16u);
  ElasticSampler f(1000, 16, 1);
  EXPECT_DOUBLE_EQ(f.LearningRateScale(4), 1.0);
  EXPECT_EQ(f.Local(0, 3).indices.size(), 6u);  // 16 = 6 + 5 + 5
  EXPECT_EQ(f.Local(2, 3).indices.size(), 5u);
}

// Micro-batches cover the local batch and their weights add up to its weight.
TEST(ElasticSampler, MicroBatchesForGradientAccumulation) {
  ElasticSampler s(100, 30, 1);
  auto b = s.Local(0, 2);
  auto micro = ElasticSampler::SplitMicroBatches(b, 4);
  ASSERT_EQ(micro.size(), 4u);
  double w = 0;
  size_t n = 0;
  for (auto& m : micro) {
    w += m.weight;
    n += m.indices.size();
  }
  EXPECT_EQ(n, 15u);
  EXPECT_NEAR(w, b.weight, 1e-12);
}

// Sequential order visits 0, 1, 2, ... each epoch; the step that ends an
// epoch says so; indices convert to the type a dataset takes.
TEST(ElasticSampler, SequentialOrderEpochEndAndIndexType) {
  ElasticSampler sampler(10, 4, 1, SamplerOptions{.shuffle = false});
  std::vector<int64_t> seen;
  std::vector<bool> ends;
  for (int step = 0; step < 6; ++step) {
    auto batch = sampler.Local(0, 1);
    seen.insert(seen.end(), batch.indices.begin(), batch.indices.end());
    ends.push_back(batch.last_in_epoch);
    sampler.Advance(1);
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(ends, (std::vector<bool>{false, false, true, false, false, true}));
  auto batch = ElasticSampler(10, 4, 1, SamplerOptions{.shuffle = false}).Local(1, 2);
  std::vector<std::size_t> as_size_t = batch.As();
  EXPECT_EQ(as_size_t, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(batch.As<int>(), (std::vector<int>{2, 3}));
}

// The caller's order per epoch is followed (asked once per epoch), a
// restored position finds the same samples in it, and an order that is not a
// permutation of the dataset is refused with the epoch and the bad entry.
TEST(ElasticSampler, CallersOrderPerEpochIsFollowedAndChecked) {
  int calls = 0;
  SamplerOptions o;
  o.order = [&](int64_t epoch) {
    ++calls;
    std::vector<int64_t> v(6);
    for (int64_t i = 0; i < 6; ++i) v[size_t(i)] = (5 - i + epoch) % 6;  // 5 4 3 2 1 0, then 0 5 4 ...
    return v;
  };
  ElasticSampler sampler(6, 4, 1, o);
  EXPECT_EQ(sampler.Local(0, 2).indices, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(sampler.Local(1, 2).indices, (std::vector<int64_t>{3, 2}));
  sampler.Advance(2);
  EXPECT_EQ(sampler.Local(0, 1).indices, (std::vector<int64_t>{1, 0}));
  sampler.Advance(1);
  EXPECT_EQ(sampler.Local(0, 1).indices, (std::vector<int64_t>{0, 5, 4, 3}));
  EXPECT_EQ(calls, 2);
  ElasticSampler restored(6, 4, 1, o);
  restored.SetPosition(1, 4);
  EXPECT_EQ(restored.Local(0, 1).indices, (std::vector<int64_t>{2, 1}));

  SamplerOptions bad;
  bad.order = [](int64_t epoch) { return epoch == 0 ? std::vector<int64_t>{0, 1, 1} : std::vector<int64_t>{0, 1}; };
  ElasticSampler dup(3, 2, 1, bad);
  try {
    (void)dup.Local(0, 1);
    ADD_FAILURE() << "a repeated index was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("epoch 0 is not a permutation of [0, 3): entry 2 is 1 again"),
              std::string::npos) << e.what();
  }
  dup.SetPosition(1, 0);
  EXPECT_THROW((void)dup.Local(0, 1), std::invalid_argument);  // 2 entries for 3 samples
}

// A sample's dropout mask is the same at every world size: the rows of each
// rank's masks are the rows of the whole global batch's masks (world 1), and
// the keys change with the epoch and the salt.
TEST(SampleDropout, MasksDoNotDependOnTheWorldSize) {
  ElasticSampler sampler(50, 12, 3);
  sampler.Advance(1);
  auto whole = sampler.Local(0, 1);
  ASSERT_EQ(whole.random_keys.size(), 12u);
  auto reference = SampleDropoutMask(whole.random_keys, 64, 0.3, 7);
  for (int world : {2, 3, 4, 5}) {
    int64_t row = 0;
    for (int rank = 0; rank < world; ++rank) {
      auto local = sampler.Local(rank, world);
      ASSERT_EQ(local.random_keys.size(), local.indices.size());
      auto mask = SampleDropoutMask(local.random_keys, 64, 0.3, 7);
      EXPECT_TRUE(torch::equal(mask, reference.narrow(0, row, int64_t(local.indices.size()))))
          << "world " << world << " rank " << rank;
      row += int64_t(local.indices.size());
    }
  }
  // Inverted dropout: kept elements are scaled by 1/(1-p); about p dropped.
  auto big = SampleDropoutMask(whole.random_keys, 4096, 0.3, 7);
  double dropped = (big == 0).to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(dropped, 0.3, 0.02);
  EXPECT_NEAR(big.max().item<double>(), 1 / 0.7, 1e-6);
  EXPECT_FALSE(torch::equal(big, SampleDropoutMask(whole.random_keys, 4096, 0.3, 8))) << "salt ignored";
  EXPECT_NE(SampleKey(3, 0, 5), SampleKey(3, 1, 5));
  EXPECT_NE(SampleKey(3, 0, 5), SampleKey(4, 0, 5));
  // Gradients flow through the mask; eval mode and p = 0 are the identity.
  auto x = torch::ones({12, 4, 2}, torch::requires_grad());
  SampleDropout(x, whole.random_keys, 0.5, 1).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), SampleDropoutMask(whole.random_keys, 8, 0.5, 1).view({12, 4, 2})));
  EXPECT_TRUE(SampleDropout(x, whole.random_keys, 0.5, 1, /*training=*/false).is_same(x));
  EXPECT_THROW(SampleDropout(x.narrow(0, 0, 3), whole.random_keys, 0.5, 1), std::invalid_argument);
  EXPECT_THROW(SampleDropoutMask(whole.random_keys, 4, 1.0, 1), std::invalid_argument);
}

}  // namespace
}  // namespace aryl
