// The multi-layer perceptron of examples/elastic_mlp, shared with the runtime
// benchmark so that both measure the same model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>

#include "aryl/sample_random.h"

namespace aryl::examples {

// `layers` hidden Linear+ReLU layers of width `hidden`, then a Linear to
// `classes`. With dropout > 0, each hidden layer's output goes through
// aryl::SampleDropout (salt: the layer's number) with the batch's random keys,
// so a sample's masks do not depend on the world size.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int layers, int64_t classes, double dropout = 0.0) : dropout_(dropout) {
    int64_t width = in;
    for (int i = 0; i < layers; ++i) {
      body->push_back(torch::nn::Linear(width, hidden));
      body->push_back(torch::nn::ReLU());
      width = hidden;
    }
    body->push_back(torch::nn::Linear(width, classes));
    register_module("body", body);
  }
  torch::Tensor forward(torch::Tensor x, std::span<const uint64_t> keys = {}) {
    if (dropout_ == 0.0) return body->forward(x);
    uint64_t salt = 0;
    for (auto& layer : *body) {
      x = layer.forward(x);
      if (layer.ptr()->as<torch::nn::ReLUImpl>()) x = aryl::SampleDropout(x, keys, dropout_, ++salt, is_training());
    }
    return x;
  }
  torch::nn::Sequential body;
  double dropout_;
};
TORCH_MODULE(Mlp);

}  // namespace aryl::examples
