// _aryl: the Python bindings of the elastic runtime. A thin layer: the
// gradient all-reduce, the state transfer, the rendezvous and the
// communicator rebuild all run in aryl_runtime (C++); Python supplies its
// modules' and optimizers' tensors through StateSource (aryl/state.py).
//
// The GIL is released while Step() and AllReduceGradients() block; the
// StateSource overrides take it back when the runtime calls them.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>

#include "aryl/aryl.h"

namespace py = pybind11;

namespace aryl {
namespace {

// Lets Python classes implement StateSource.
class PyStateSource : public StateSource {
 public:
  std::string Metadata() const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const StateSource*>(this), "metadata");
    if (!f) throw std::runtime_error("StateSource.metadata is not implemented");
    return f().cast<py::bytes>();
  }
  Status Restore(std::string_view metadata) override {
    py::gil_scoped_acquire gil;
    try {
      py::function f = py::get_override(static_cast<const StateSource*>(this), "restore");
      if (!f) return Status::Internal("StateSource.restore is not implemented");
      f(py::bytes(metadata.data(), metadata.size()));
      return Status::Ok();
    } catch (py::error_already_set& e) {
      return Status::InvalidArgument(e.what());
    }
  }
  std::vector<at::Tensor> Tensors() const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const StateSource*>(this), "tensors");
    if (!f) throw std::runtime_error("StateSource.tensors is not implemented");
    return f().cast<std::vector<at::Tensor>>();
  }
};

template <typename T>
T OrRaise(Result<T> r) {
  if (!r.ok()) throw std::runtime_error(r.status().ToString());
  return std::move(*r);
}

void OrRaise(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

py::dict ReportDict(const ResizeReport& r) {
  py::dict d;
  d["from_generation"] = r.from_generation;
  d["to_generation"] = r.to_generation;
  d["from_world"] = r.from_world;
  d["to_world"] = r.to_world;
  d["step"] = r.step;
  d["planned"] = r.planned;
  d["detect_s"] = r.detect_s;
  d["agree_s"] = r.agree_s;
  d["rendezvous_s"] = r.rendezvous_s;
  d["communicator_s"] = r.communicator_s;
  d["transfer_s"] = r.transfer_s;
  d["total_s"] = r.total_s;
  return d;
}

}  // namespace
}  // namespace aryl

PYBIND11_MODULE(_aryl, m) {
  using namespace aryl;
  m.doc() = "Bindings of the Aryl elastic training runtime (use the aryl package)";

  py::class_<ElasticSampler::Batch>(m, "Batch")
      .def_readonly("indices", &ElasticSampler::Batch::indices)
      .def_readonly("weight", &ElasticSampler::Batch::weight)
      .def_readonly("epoch", &ElasticSampler::Batch::epoch)
      .def_readonly("global_size", &ElasticSampler::Batch::global_size)
      .def_readonly("last_in_epoch", &ElasticSampler::Batch::last_in_epoch)
      .def_readonly("random_keys", &ElasticSampler::Batch::random_keys);

  m.def("sample_key", &SampleKey, py::arg("seed"), py::arg("epoch"), py::arg("sample"));
  m.def("sample_dropout_mask",
        [](const std::vector<uint64_t>& keys, int64_t row_numel, double p, uint64_t salt) {
          try {
            return SampleDropoutMask(keys, row_numel, p, salt);
          } catch (const std::invalid_argument& e) {
            throw py::value_error(e.what());
          }
        },
        py::arg("keys"), py::arg("row_numel"), py::arg("p"), py::arg("salt"));

  py::class_<ElasticSampler>(m, "ElasticSampler")
      .def(py::init([](int64_t dataset_size, int64_t batch, uint64_t seed, bool shuffle, bool linear_scaling,
                       int reference_world, std::function<std::vector<int64_t>(int64_t)> order) {
             SamplerOptions o;
             o.shuffle = shuffle;
             o.policy = linear_scaling ? BatchPolicy::kLinearScaling : BatchPolicy::kFixedGlobal;
             o.reference_world = reference_world;
             o.order = std::move(order);  // None: empty
             return std::make_unique<ElasticSampler>(dataset_size, batch, seed, o);
           }),
           py::arg("dataset_size"), py::arg("batch"), py::arg("seed"), py::arg("shuffle") = true,
           py::arg("linear_scaling") = false, py::arg("reference_world") = 1, py::arg("order") = py::none())
      .def("local", &ElasticSampler::Local, py::arg("rank"), py::arg("world"))
      .def("global_batch", &ElasticSampler::GlobalBatch)
      .def("learning_rate_scale", &ElasticSampler::LearningRateScale)
      .def("set_position", &ElasticSampler::SetPosition)
      .def_property_readonly("epoch", &ElasticSampler::epoch)
      .def_property_readonly("cursor", &ElasticSampler::cursor)
      .def_property_readonly("dataset_size", &ElasticSampler::dataset_size);

  py::class_<StateSource, PyStateSource>(m, "StateSource").def(py::init<>());

  py::class_<ElasticState>(m, "ElasticState")
      .def(py::init<>())
      .def("track_source", [](ElasticState& s, StateSource& src, std::string name) { s.Track(src, std::move(name)); },
           py::keep_alive<1, 2>(), py::arg("source"), py::arg("name"))
      .def("track_sampler", [](ElasticState& s, ElasticSampler& sampler, std::string name) {
             s.Track(sampler, std::move(name));
           }, py::keep_alive<1, 2>(), py::arg("sampler"), py::arg("name"))
      .def("track_random_state", &ElasticState::TrackRandomState)
      .def_property("step", &ElasticState::step, &ElasticState::set_step)
      .def("serialize", [](const ElasticState& s) { return py::bytes(OrRaise(s.Serialize())); })
      .def("deserialize", [](ElasticState& s, const py::bytes& b) { OrRaise(s.Deserialize(std::string(b))); });

  py::class_<Runtime>(m, "Runtime")
      .def_static("from_env", [] { return OrRaise(Runtime::Create(OrRaise(RuntimeOptions::FromEnv()))); })
      .def("step", &Runtime::Step, py::call_guard<py::gil_scoped_release>())
      .def("all_reduce_gradients",
           [](Runtime& rt, const std::vector<at::Tensor>& params, double weight) {
             py::gil_scoped_release release;
             return rt.AllReduceGradients(params, weight);
           }, py::arg("parameters"), py::arg("weight") = -1.0)
      .def_property_readonly("rank", &Runtime::Rank)
      .def_property_readonly("world_size", &Runtime::WorldSize)
      .def_property_readonly("generation", &Runtime::Generation)
      .def_property_readonly("worker_id", &Runtime::WorkerId)
      .def_property_readonly("status", [](const Runtime& rt) { return rt.status().ToString(); })
      .def_property_readonly("ok", [](const Runtime& rt) { return rt.status().ok(); })
      .def_property_readonly("exit_code", &Runtime::ExitCode)
      .def_property_readonly("resizes", [](const Runtime& rt) {
        py::list out;
        for (const auto& r : rt.Resizes()) out.append(ReportDict(r));
        return out;
      })
      .def("checkpoint_now", [](Runtime& rt, const ElasticState& s) {
        py::gil_scoped_release release;
        return rt.CheckpointNow(s).ToString();
      })
      .def("request_stop", &Runtime::RequestStop)
      .def("report_loss", &Runtime::ReportLoss)
      .def("report_local_batch", &Runtime::ReportLocalBatch, py::arg("samples"))
      .def("set_total_steps", &Runtime::SetTotalSteps, py::arg("steps"));
}
