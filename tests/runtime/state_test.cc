#include <gtest/gtest.h>
#include <torch/torch.h>

#include "aryl/elastic_sampler.h"
#include "aryl/elastic_state.h"

namespace aryl {
namespace {

struct Model {
  Model() : net(torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 2))) {}
  torch::nn::Sequential net;
};

void TrainSteps(torch::nn::Sequential& net, torch::optim::Optimizer& opt, int steps) {
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    net->forward(torch::randn({6, 4})).pow(2).sum().backward();
    opt.step();
  }
}

// Parameters, BatchNorm buffers, Adam moments, scalars and the sampler move
// through Serialize/Deserialize; training continues identically.
TEST(ElasticState, RoundTripContinuesIdentically) {
  torch::manual_seed(0);
  Model a, b;
  torch::optim::Adam opt_a(a.net->parameters(), 0.01), opt_b(b.net->parameters(), 0.01);
  ElasticSampler sa(100, 10, 1), sb(100, 10, 1);
  int64_t epoch_a = 7, epoch_b = 0;
  double lr_a = 0.5, lr_b = 0;
  ElasticState state_a, state_b;
  state_a.Track(a.net);
  state_a.Track(opt_a);
  state_a.Track(sa);
  state_a.Track("epoch", &epoch_a);
  state_a.Track("lr", &lr_a);
  state_b.Track(b.net);
  state_b.Track(opt_b);
  state_b.Track(sb);
  state_b.Track("epoch", &epoch_b);
  state_b.Track("lr", &lr_b);
  TrainSteps(a.net, opt_a, 3);
  sa.Advance(2);
  sa.Advance(2);
  state_a.set_step(17);
  auto bytes = state_a.Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(state_b.Deserialize(*bytes).ok());
  EXPECT_EQ(state_b.step(), 17);
  EXPECT_EQ(epoch_b, 7);
  EXPECT_EQ(lr_b, 0.5);
  EXPECT_EQ(sb.cursor(), 20);
  auto pa = a.net->named_buffers(), pb = b.net->named_buffers();
  for (auto& kv : pa) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << kv.key();
  torch::manual_seed(9);
  TrainSteps(a.net, opt_a, 2);
  torch::manual_seed(9);
  TrainSteps(b.net, opt_b, 2);
  auto qa = a.net->parameters(), qb = b.net->parameters();
  for (size_t i = 0; i < qa.size(); ++i) EXPECT_TRUE(torch::equal(qa[i], qb[i])) << "param " << i;
}

// The joiner fast path (metadata + tensors copied in place) for SGD with
// momentum and for AdamW: the receiver continues exactly like the sender.
template <typename Opt, typename Options>
void FastPathContinuesIdentically(Options options) {
  torch::manual_seed(0);
  Model a, b;
  Opt opt_a(a.net->parameters(), options), opt_b(b.net->parameters(), options);
  ElasticSampler sa(100, 10, 1), sb(100, 10, 1);
  ElasticState state_a, state_b;
  state_a.Track(a.net);
  state_a.Track(opt_a);
  state_a.Track(sa);
  state_b.Track(b.net);
  state_b.Track(opt_b);
  state_b.Track(sb);
  TrainSteps(a.net, opt_a, 3);
  sa.Advance(3);
  state_a.set_step(3);
  auto meta = state_a.SerializeMetadata();
  ASSERT_TRUE(meta.ok()) << meta.status();
  ASSERT_TRUE(state_b.DeserializeMetadata(*meta).ok());
  auto from = state_a.TransferTensors(), to = state_b.TransferTensors();
  ASSERT_EQ(from.size(), to.size());
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  EXPECT_EQ(state_b.step(), 3);
  EXPECT_EQ(sb.cursor(), 10);
  torch::manual_seed(5);
  TrainSteps(a.net, opt_a, 2);
  torch::manual_seed(5);
  TrainSteps(b.net, opt_b, 2);
  auto qa = a.net->parameters(), qb = b.net->parameters();
  for (size_t i = 0; i < qa.size(); ++i) EXPECT_TRUE(torch::equal(qa[i], qb[i])) << "param " << i;
}

TEST(ElasticState, FastPathSgdMomentum) {
  FastPathContinuesIdentically<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
}
TEST(ElasticState, FastPathAdamW) {
  FastPathContinuesIdentically<torch::optim::AdamW>(torch::optim::AdamWOptions(0.01).amsgrad(true));
}

TEST(ElasticState, GarbageIsCorruption) {
  Model a;
  ElasticState s;
  s.Track(a.net);
  Status st = s.Deserialize("definitely not a torch archive");
  EXPECT_TRUE(st.IsCorruption()) << st;
}

// A plain module (no holder, no shared_ptr) tracked by reference.
struct PlainNet : torch::nn::Module {
  PlainNet() { fc = register_module("fc", torch::nn::Linear(3, 2)); }
  torch::nn::Linear fc{nullptr};
};

TEST(ElasticState, TracksPlainModulesByReference) {
  torch::manual_seed(1);
  PlainNet a;
  torch::manual_seed(2);
  PlainNet b;
  ElasticState sa, sb;
  sa.Track(a);
  sb.Track(b);
  auto bytes = sa.Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(sb.Deserialize(*bytes).ok());
  EXPECT_TRUE(torch::equal(a.fc->weight, b.fc->weight));
}

// A StateSource (how the Python API tracks its objects): metadata restores
// the shapes, tensors move through checkpoints and the joiner path.
class VectorSource : public StateSource {
 public:
  std::string Metadata() const override { return std::to_string(values.numel()); }
  Status Restore(std::string_view metadata) override {
    if (metadata.empty()) return Status::InvalidArgument("empty metadata");
    values = torch::zeros({std::stoll(std::string(metadata))});
    return Status::Ok();
  }
  std::vector<at::Tensor> Tensors() const override { return {values}; }
  torch::Tensor values = torch::zeros({0});
};

TEST(ElasticState, StateSourceMovesThroughBothPaths) {
  VectorSource a, b, c;
  a.values = torch::arange(5, torch::kFloat32);
  ElasticState sa, sb, sc;
  sa.Track(a, "v");
  sb.Track(b, "v");
  sc.Track(c, "v");
  auto bytes = sa.Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(sb.Deserialize(*bytes).ok());
  EXPECT_TRUE(torch::equal(a.values, b.values));
  // Joiner path: metadata first creates the tensor, then it is written in place.
  auto meta = sa.SerializeMetadata();
  ASSERT_TRUE(meta.ok());
  ASSERT_TRUE(sc.DeserializeMetadata(*meta).ok());
  auto from = sa.TransferTensors(), to = sc.TransferTensors();
  ASSERT_EQ(to.size(), 1u);
  EXPECT_EQ(to[0].numel(), 5);
  to[0].copy_(from[0]);
  EXPECT_TRUE(torch::equal(c.values, a.values));
}

// The CPU generator travels with the state: after restoring, random ops
// continue the sequence of the worker that saved it.
TEST(ElasticState, RandomStateContinuesTheSequence) {
  ElasticState state;
  state.TrackRandomState();
  torch::manual_seed(3);
  (void)torch::rand({7});
  auto bytes = state.Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto expected = torch::dropout(torch::ones({64}), 0.5, true);
  torch::manual_seed(99);
  ASSERT_TRUE(state.Deserialize(*bytes).ok());
  EXPECT_TRUE(torch::equal(torch::dropout(torch::ones({64}), 0.5, true), expected));
}

}  // namespace
}  // namespace aryl
