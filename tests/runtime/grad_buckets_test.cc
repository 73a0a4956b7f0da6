#include "grad_buckets.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace aryl {
namespace {

// Steady state: the layout is built once, every .grad lives in the bucket,
// autograd accumulates into it and libtorch's zero_grad() (detach_ + zero_)
// keeps it there; a grad set to None or replaced is adopted again.
TEST(GradBuckets, GradientsStayInTheBucketAcrossSteps) {
  torch::nn::Linear model(3, 2);
  torch::optim::SGD opt(model->parameters(), 0.1);
  GradBuckets buckets(25u << 20);
  auto params = model->parameters();
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    model(torch::ones({4, 3})).sum().backward();
    auto expected_bias = torch::full({2}, 4.f);
    ASSERT_TRUE(buckets.Prepare(params, 4).ok());
    ASSERT_EQ(buckets.views().size(), 1u);
    const float* base = static_cast<const float*>(buckets.views()[0].data);
    EXPECT_EQ(buckets.views()[0].count, size_t(3 * 2 + 2 + 4));
    EXPECT_EQ(model->weight.grad().data_ptr<float>(), base);
    EXPECT_EQ(model->bias.grad().data_ptr<float>(), base + 6);
    EXPECT_TRUE(torch::equal(model->bias.grad(), expected_bias)) << model->bias.grad();
    buckets.Scale(0.5);
    EXPECT_TRUE(torch::equal(model->bias.grad(), expected_bias * 0.5));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(buckets.control()[i], 0.f);  // slots start at zero, not scaled
    buckets.control()[1] = 7.f;
  }
  EXPECT_EQ(buckets.layouts(), 1);
  // set_to_none style: an undefined grad is zeroed in the bucket; a foreign one copied in.
  model->bias.mutable_grad() = at::Tensor();
  model->weight.mutable_grad() = torch::full({2, 3}, 2.f);
  ASSERT_TRUE(buckets.Prepare(params, 4).ok());
  EXPECT_TRUE(torch::equal(model->bias.grad(), torch::zeros({2})));
  EXPECT_TRUE(torch::equal(model->weight.grad(), torch::full({2, 3}, 2.f)));
  EXPECT_EQ(model->weight.grad().data_ptr<float>(), static_cast<const float*>(buckets.views()[0].data));
  // A new slot count (another world size) lays out again.
  ASSERT_TRUE(buckets.Prepare(params, 5).ok());
  EXPECT_EQ(buckets.layouts(), 2);
  EXPECT_TRUE(torch::equal(model->weight.grad(), torch::full({2, 3}, 2.f)));
  // Not float32: an error naming the gradient.
  auto d = torch::zeros({2}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto s = buckets.Prepare({d}, 4);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("gradient 0 is Double"), std::string::npos) << s.ToString();
}

// Small buckets: one per ~bucket_bytes of consecutive gradients, the control
// slots at the end of the last.
TEST(GradBuckets, CutsBucketsBySize) {
  std::vector<at::Tensor> params;
  for (int i = 0; i < 5; ++i) params.push_back(torch::zeros({100}, torch::requires_grad()));
  GradBuckets buckets(800);  // two gradients of 400 bytes each per bucket
  ASSERT_TRUE(buckets.Prepare(params, 3).ok());
  ASSERT_EQ(buckets.views().size(), 3u);
  EXPECT_EQ(buckets.views()[0].count, 200u);
  EXPECT_EQ(buckets.views()[2].count, 103u);
  EXPECT_EQ(buckets.control(), static_cast<float*>(buckets.views()[2].data) + 100);
}

}  // namespace
}  // namespace aryl
