// The multi-layer perceptron of examples/elastic_mlp, shared with the runtime
// benchmark so that both measure the same model.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace aryl::examples {

// `layers` hidden Linear+ReLU layers of width `hidden`, then a Linear to `classes`.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int layers, int64_t classes) {
    int64_t width = in;
    for (int i = 0; i < layers; ++i) {
      body->push_back(torch::nn::Linear(width, hidden));
      body->push_back(torch::nn::ReLU());
      width = hidden;
    }
    body->push_back(torch::nn::Linear(width, classes));
    register_module("body", body);
  }
  torch::Tensor forward(torch::Tensor x) { return body->forward(x); }
  torch::nn::Sequential body;
};
TORCH_MODULE(Mlp);

}  // namespace aryl::examples
