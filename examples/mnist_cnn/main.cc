// mnist_cnn: a small CNN on MNIST (idx files under --data: train-images-idx3-ubyte,
// train-labels-idx1-ubyte) or on synthetic 28x28 digits-like data when no
// path is given. Fixed-size or elastic, like elastic_mlp.
//
//   build/examples/mnist_cnn --data /path/to/mnist --steps 500
#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "aryl/elastic_sampler.h"
#include "aryl/elastic_state.h"
#include "aryl/flags.h"
#include "aryl/runtime.h"
#include "common.h"

namespace {

struct CnnImpl : torch::nn::Module {
  CnnImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 4 * 4, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Cnn);

uint32_t BigEndian(std::istream& in) {
  unsigned char b[4] = {};
  in.read(reinterpret_cast<char*>(b), 4);
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
}

// Reads the idx pair; false (with a message) when the files are missing or malformed.
bool LoadMnist(const std::string& dir, torch::Tensor* images, torch::Tensor* labels) {
  std::ifstream img(dir + "/train-images-idx3-ubyte", std::ios::binary);
  std::ifstream lab(dir + "/train-labels-idx1-ubyte", std::ios::binary);
  if (!img || !lab) {
    std::fprintf(stderr, "mnist_cnn: cannot open idx files under %s\n", dir.c_str());
    return false;
  }
  if (BigEndian(img) != 2051 || BigEndian(lab) != 2049) {
    std::fprintf(stderr, "mnist_cnn: bad idx magic under %s\n", dir.c_str());
    return false;
  }
  uint32_t n = BigEndian(img), rows = BigEndian(img), cols = BigEndian(img);
  uint32_t nl = BigEndian(lab);
  if (n != nl || rows != 28 || cols != 28) {
    std::fprintf(stderr, "mnist_cnn: %u images of %ux%u vs %u labels\n", n, rows, cols, nl);
    return false;
  }
  std::vector<uint8_t> pix(size_t(n) * 784), lbl(n);
  img.read(reinterpret_cast<char*>(pix.data()), std::streamsize(pix.size()));
  lab.read(reinterpret_cast<char*>(lbl.data()), std::streamsize(lbl.size()));
  if (!img || !lab) {
    std::fprintf(stderr, "mnist_cnn: truncated idx files under %s\n", dir.c_str());
    return false;
  }
  *images = torch::from_blob(pix.data(), {int64_t(n), 1, 28, 28}, torch::kUInt8).to(torch::kFloat32).div(255.0);
  *images = (*images - 0.1307) / 0.3081;
  *labels = torch::from_blob(lbl.data(), {int64_t(n)}, torch::kUInt8).to(torch::kInt64);
  return true;
}

// Synthetic stand-in: each class is a fixed random 28x28 pattern plus noise.
void SyntheticDigits(int64_t n, torch::Tensor* images, torch::Tensor* labels) {
  torch::manual_seed(7);
  auto patterns = torch::randn({10, 1, 28, 28});
  *labels = torch::randint(0, 10, {n}, torch::kInt64);
  *images = patterns.index_select(0, *labels) + 0.8 * torch::randn({n, 1, 28, 28});
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("mnist_cnn", "small CNN on MNIST (or synthetic digits), elastic data parallel");
  options.add_options()("data", "directory with MNIST idx files (synthetic when empty)",
                        cxxopts::value<std::string>()->default_value(""))(
      "steps", "training steps", cxxopts::value<int64_t>()->default_value("300"))(
      "global-batch", "global batch", cxxopts::value<int64_t>()->default_value("64"))(
      "synthetic-samples", "synthetic dataset size", cxxopts::value<int64_t>()->default_value("6000"))(
      "lr", "learning rate (SGD momentum 0.9)", cxxopts::value<double>()->default_value("0.02"))(
      "log-every", "print every N steps", cxxopts::value<int64_t>()->default_value("10"))(
      "threads", "intra-op threads per worker", cxxopts::value<int>()->default_value("1"));
  aryl::AddCommonFlags(options);
  auto flags = aryl::ParseFlagsOrExit(options, argc, argv);
  const int64_t steps = flags["steps"].as<int64_t>();
  torch::set_num_threads(flags["threads"].as<int>());

  torch::Tensor images, labels;
  std::string data = flags["data"].as<std::string>();
  if (data.empty()) {
    SyntheticDigits(flags["synthetic-samples"].as<int64_t>(), &images, &labels);
  } else if (!LoadMnist(data, &images, &labels)) {
    return 2;
  }
  torch::manual_seed(1);
  Cnn model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(flags["lr"].as<double>()).momentum(0.9));
  aryl::ElasticSampler sampler(images.size(0), flags["global-batch"].as<int64_t>(), 3);
  aryl::ElasticState state;
  state.Track(model);
  state.Track(optimizer);
  state.Track(sampler);

  auto rt = aryl::Runtime::FromEnv();
  aryl::examples::ProgressPrinter progress(flags["log-every"].as<int64_t>());
  double last_loss = 0;
  while (rt.Step(state) && state.step() < steps) {
    auto batch = sampler.Local(rt.Rank(), rt.WorldSize());
    auto idx = torch::tensor(batch.indices, torch::kInt64);
    optimizer.zero_grad();
    auto logits = model->forward(images.index_select(0, idx));
    auto loss = torch::nn::functional::cross_entropy(logits, labels.index_select(0, idx));
    loss.backward();
    if (!rt.AllReduceGradients(*model, batch.weight)) continue;
    optimizer.step();
    last_loss = loss.item<double>();
    rt.ReportLoss(last_loss);
    if (rt.Rank() == 0) progress.Step(state.step() + 1, last_loss, rt.WorldSize(), rt.Generation(), batch.global_size);
  }
  if (rt.status().ok() && state.step() >= steps && rt.Rank() == 0) {
    std::printf("done steps=%lld loss=%.5f world=%d resizes=%zu data=%s\n", (long long)state.step(), last_loss,
                rt.WorldSize(), rt.Resizes().size(), data.empty() ? "synthetic" : "mnist");
  }
  return rt.ExitCode();
}
