#include "rendezvous.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <sstream>

#include "protocol_store.h"

namespace aryl {
namespace {

std::string FirstLine(std::string s) {
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

Status StoreError(const std::exception& e, const std::string& key) {
  std::string what = FirstLine(e.what());
  if (what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos) {
    return Status::Timeout("store key '" + key + "': " + what);
  }
  return Status::Unavailable("store key '" + key + "': " + what);
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

std::string GenerationRecord::Encode() const {
  std::string out = "prev=" + std::to_string(prev) + ";members=";
  for (size_t i = 0; i < members.size(); ++i) out += (i ? "," : "") + members[i];
  return out;
}

Result<GenerationRecord> GenerationRecord::Decode(int64_t generation, const std::string& text) {
  GenerationRecord r;
  r.generation = generation;
  auto semi = text.find(';');
  if (text.rfind("prev=", 0) != 0 || semi == std::string::npos || text.compare(semi + 1, 8, "members=") != 0) {
    return Status::Corruption("generation " + std::to_string(generation) + ": bad record '" + text + "'");
  }
  r.prev = std::stoll(text.substr(5, semi - 5));
  std::stringstream ss(text.substr(semi + 9));
  std::string id;
  while (std::getline(ss, id, ',')) {
    if (!id.empty()) r.members.push_back(id);
  }
  if (r.members.empty()) {
    return Status::Corruption("generation " + std::to_string(generation) + ": no members in '" + text + "'");
  }
  return r;
}

JobStore::JobStore(c10::intrusive_ptr<c10d::Store> store, std::string job_id)
    : store_(std::move(store)), job_id_(std::move(job_id)) {}
JobStore::~JobStore() = default;

Result<JobStore> JobStore::Connect(const std::string& endpoint, const std::string& job_id,
                                   std::chrono::milliseconds timeout) {
  if (endpoint.rfind("tcp://", 0) == 0 || endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) {
    ARYL_ASSIGN_OR_RETURN(auto store, ProtocolStore::Connect(endpoint, timeout));
    JobStore js(store, job_id);
    js.endpoint_ = endpoint;
    return js;
  }
  std::string ep = endpoint;
  if (ep.rfind("c10d://", 0) == 0) ep = ep.substr(7);
  auto colon = ep.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("store endpoint '" + endpoint + "': expected host:port");
  }
  c10d::TCPStoreOptions opts;
  try {
    opts.port = uint16_t(std::stoi(ep.substr(colon + 1)));
  } catch (...) {
    return Status::InvalidArgument("store endpoint '" + endpoint + "': bad port");
  }
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(ep.substr(0, colon), opts);
    JobStore js(store, job_id);
    js.host_ = ep.substr(0, colon);
    js.port_ = opts.port;
    js.endpoint_ = endpoint;
    return js;
  } catch (const std::exception& e) {
    return Status::Unavailable("connect to store " + endpoint + ": " + FirstLine(e.what()));
  }
}

Result<JobStore> JobStore::Serve(int port, const std::string& job_id, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = uint16_t(port);
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
    JobStore js(store, job_id);
    js.host_ = "127.0.0.1";
    js.port_ = store->getPort();
    js.endpoint_ = "127.0.0.1:" + std::to_string(js.port_);
    return js;
  } catch (const std::exception& e) {
    return Status::Unavailable("serve store on port " + std::to_string(port) + ": " + FirstLine(e.what()));
  }
}

Result<JobStore> JobStore::ServeProtocol(const std::string& endpoint, const std::string& job_id,
                                         std::chrono::milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(std::shared_ptr<ProtocolStoreServer> server, ProtocolStoreServer::Start(endpoint));
  ARYL_ASSIGN_OR_RETURN(JobStore js, Connect(server->endpoint(), job_id, timeout));
  js.server_ = server;
  return js;
}

Status JobStore::Set(const std::string& suffix, const std::string& value) {
  try {
    store_->set(Key(suffix), Bytes(value));
    return Status::Ok();
  } catch (const std::exception& e) {
    return StoreError(e, Key(suffix));
  }
}

Result<std::string> JobStore::Get(const std::string& suffix) {
  try {
    return Text(store_->get(Key(suffix)));
  } catch (const std::exception& e) {
    return StoreError(e, Key(suffix));
  }
}

Result<std::string> JobStore::Wait(const std::string& suffix, std::chrono::milliseconds timeout) {
  try {
    store_->wait({Key(suffix)}, timeout);
    return Text(store_->get(Key(suffix)));
  } catch (const std::exception& e) {
    return StoreError(e, Key(suffix));
  }
}

Result<bool> JobStore::Check(const std::string& suffix) {
  try {
    return store_->check({Key(suffix)});
  } catch (const std::exception& e) {
    return StoreError(e, Key(suffix));
  }
}

Status JobStore::Delete(const std::string& suffix) {
  try {
    store_->deleteKey(Key(suffix));
    return Status::Ok();
  } catch (const std::exception& e) {
    return StoreError(e, Key(suffix));
  }
}

Result<std::optional<std::string>> JobStore::TryGet(const std::string& suffix) {
  ARYL_ASSIGN_OR_RETURN(bool present, Check(suffix));
  if (!present) return std::optional<std::string>();
  ARYL_ASSIGN_OR_RETURN(std::string v, Get(suffix));
  return std::optional<std::string>(std::move(v));
}

Result<int64_t> JobStore::Add(const std::string& suffix, int64_t delta) {
  try {
    return store_->add(Key(suffix), delta);
  } catch (const std::exception& e) {
    return StoreError(e, Key(suffix));
  }
}

Result<GenerationRecord> JobStore::ReadGeneration(int64_t generation, std::chrono::milliseconds timeout) {
  ARYL_ASSIGN_OR_RETURN(std::string text, Wait("gen/" + std::to_string(generation), timeout));
  return GenerationRecord::Decode(generation, text);
}

Status JobStore::PublishAs(const GenerationRecord& record) {
  ARYL_RETURN_IF_ERROR(Set("gen/" + std::to_string(record.generation), record.Encode()));
  // "latest" only moves forward (best effort: the publishers are the planner
  // and fault recovery, see aryl/protocol/generation.h).
  ARYL_ASSIGN_OR_RETURN(int64_t latest, Latest());
  if (record.generation > latest) ARYL_RETURN_IF_ERROR(Set("gen/latest", std::to_string(record.generation)));
  return Status::Ok();
}

Result<int64_t> JobStore::Latest() {
  // One round trip: adding 0 reads the number ("0" when nothing was published).
  return Add("gen/latest", 0);
}

Result<c10::intrusive_ptr<c10d::Store>> JobStore::OwnHandle(std::chrono::milliseconds timeout) const {
  // c10d's PrefixStore::setTimeout forwards to the store below it: a handle
  // of our own keeps the job store's timeout as it is.
  if (auto* ps = dynamic_cast<ProtocolStore*>(store_.get())) {
    return c10::intrusive_ptr<c10d::Store>(ps->WithOwnTimeout(timeout));
  }
  if (host_.empty() || port_ <= 0) {
    return Status::FailedPrecondition("store " + endpoint_ + ": cannot open a second handle");
  }
  c10d::TCPStoreOptions opts;
  opts.port = uint16_t(port_);
  opts.isServer = false;
  opts.waitWorkers = false;
  // c10d connects with whole seconds (a sub-second timeout fails at once);
  // the handle's own timeout is set once it is connected.
  opts.timeout = std::max<std::chrono::milliseconds>(timeout, std::chrono::seconds(5));
  try {
    auto handle = c10::make_intrusive<c10d::TCPStore>(host_, opts);
    handle->setTimeout(timeout);
    return c10::intrusive_ptr<c10d::Store>(handle);
  } catch (const std::exception& e) {
    return Status::Unavailable("connect to store " + endpoint_ + ": " + FirstLine(e.what()));
  }
}

Result<c10::intrusive_ptr<c10d::Store>> JobStore::Prefixed(const std::string& suffix,
                                                          std::chrono::milliseconds timeout) const {
  ARYL_ASSIGN_OR_RETURN(auto handle, OwnHandle(timeout));
  return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::PrefixStore>(Key(suffix), handle));
}

Result<JobStore> JobStore::WithTimeout(std::chrono::milliseconds timeout) const {
  c10::intrusive_ptr<c10d::Store> handle;
  if (dynamic_cast<ProtocolStore*>(store_.get())) {
    ARYL_ASSIGN_OR_RETURN(auto ps, ProtocolStore::Connect(endpoint_, timeout));
    handle = ps;
  } else {
    ARYL_ASSIGN_OR_RETURN(handle, OwnHandle(timeout));
  }
  JobStore js(handle, job_id_);
  js.server_ = server_;
  js.host_ = host_;
  js.port_ = port_;
  js.endpoint_ = endpoint_;
  return js;
}

}  // namespace aryl
