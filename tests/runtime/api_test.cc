// The public API's guards: mistakes in a training loop are errors the program sees.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "aryl/aryl.h"

namespace aryl {
namespace {

// A loop that forgets AllReduceGradients (or calls Step() twice) would commit
// a step whose batch was never applied: Step() refuses, with the reason.
TEST(Runtime, StepWithoutAllReduceGradientsIsAnError) {
  auto rt = Runtime::Create(RuntimeOptions{});
  ASSERT_TRUE(rt.ok()) << rt.status();
  torch::nn::Linear model(2, 1);
  ElasticState state;
  state.Track(model);
  ASSERT_TRUE(rt->Step(state));
  model(torch::ones({1, 2})).sum().backward();
  ASSERT_TRUE(rt->AllReduceGradients(*model));
  ASSERT_TRUE(rt->Step(state));  // commits step 0
  EXPECT_EQ(state.step(), 1);
  EXPECT_FALSE(rt->Step(state));  // no AllReduceGradients for step 1
  EXPECT_EQ(rt->status().code(), Status::Code::kFailedPrecondition) << rt->status();
  EXPECT_NE(rt->status().message().find("without AllReduceGradients"), std::string::npos) << rt->status();
  EXPECT_EQ(state.step(), 1) << "the skipped step must not be committed";
  EXPECT_NE(rt->ExitCode(), 0);
}

// AllReduceGradients over a parameter list (what the Python API passes) is
// the module overload's: parameters without requires_grad are skipped.
TEST(Runtime, AllReduceGradientsOverParameterList) {
  auto rt = Runtime::Create(RuntimeOptions{});
  ASSERT_TRUE(rt.ok()) << rt.status();
  torch::nn::Linear model(2, 1);
  model->bias.set_requires_grad(false);
  ElasticState state;
  state.Track(model);
  ASSERT_TRUE(rt->Step(state));
  model(torch::ones({1, 2})).sum().backward();
  ASSERT_TRUE(rt->AllReduceGradients(model->parameters(), 0.5));
  EXPECT_TRUE(torch::allclose(model->weight.grad(), torch::full({1, 2}, 0.5)));
  EXPECT_FALSE(model->bias.grad().defined());
}

}  // namespace
}  // namespace aryl
