#include "aryl/protocol/security.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace aryl::protocol {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kZ85Chars =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

std::string Trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string Errno() { return std::strerror(errno); }

Status WriteFile(const std::string& path, const std::string& content, mode_t mode, bool exclusive) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status::AlreadyExists("key file '" + path + "' exists; not overwriting it");
    return Status::IoError("open '" + path + "': " + Errno());
  }
  // The mode given to open() is filtered by the umask; set it exactly.
  if (::fchmod(fd, mode) != 0) {
    std::string err = Errno();
    ::close(fd);
    return Status::IoError("chmod '" + path + "': " + err);
  }
  std::size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = Errno();
      ::close(fd);
      return Status::IoError("write '" + path + "': " + err);
    }
    off += std::size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    return Status::IoError("close '" + path + "': " + Errno());
  return Status::Ok();
}

// The keys of a key or allow-list file, one per line ('#' comments and blank
// lines skipped), each with its line number; "file:line: ..." on a bad key.
Result<std::vector<std::pair<int, std::string>>> ReadKeyLines(const std::string& path,
                                                              const std::string& what) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + what + " '" + path + "'");
  std::vector<std::pair<int, std::string>> keys;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    if (!IsValidZ85Key(t))
      return Status::InvalidArgument(path + ":" + std::to_string(lineno) +
                                     ": not a 40-character Z85 CURVE key");
    keys.emplace_back(lineno, std::move(t));
  }
  return keys;
}

// The single key in a key file ("file:line: ..." on error).
Result<std::string> ReadKeyFile(const std::string& path) {
  ARYL_ASSIGN_OR_RETURN(auto keys, ReadKeyLines(path, "key file"));
  if (keys.empty()) return Status::InvalidArgument(path + ": no key in file");
  if (keys.size() > 1)
    return Status::InvalidArgument(path + ":" + std::to_string(keys[1].first) +
                                   ": a key file holds exactly one key");
  return keys[0].second;
}

}  // namespace

bool IsValidZ85Key(std::string_view key) {
  if (key.size() != 40) return false;
  for (char c : key)
    if (kZ85Chars.find(c) == std::string_view::npos) return false;
  std::uint8_t out[32];
  std::string copy(key);
  return zmq_z85_decode(out, copy.c_str()) != nullptr;
}

Result<KeyPair> GenerateKeyPair() {
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    return Status::FailedPrecondition(std::string("CURVE key generation failed (libzmq without "
                                                  "CURVE support?): ") +
                                      zmq_strerror(zmq_errno()));
  return KeyPair{pub, sec};
}

Status GenerateKeyPair(const std::string& dir, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.')
    return Status::InvalidArgument("key name '" + name + "' must be a plain file name");
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return Status::IoError("create directory '" + dir + "': " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, ec);
  } else if (!fs::is_directory(dir, ec)) {
    return Status::InvalidArgument("'" + dir + "' is not a directory");
  }
  ARYL_ASSIGN_OR_RETURN(KeyPair pair, GenerateKeyPair());
  std::string base = (fs::path(dir) / name).string();
  ARYL_RETURN_IF_ERROR(WriteFile(
      base + ".key",
      "# Aryl CURVE secret key '" + name + "'. Keep it private.\n" + pair.secret_key + "\n", 0600,
      /*exclusive=*/true));
  return WriteFile(base + ".pub",
                   "# Aryl CURVE public key '" + name + "'.\n" + pair.public_key + "\n", 0644,
                   /*exclusive=*/false);
}

Result<KeyPair> LoadKeyPair(const std::string& key_file) {
  struct stat st {};
  if (::stat(key_file.c_str(), &st) != 0)
    return Status::NotFound("key file '" + key_file + "': " + Errno());
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return Status::PermissionDenied("secret key file '" + key_file + "' has mode " + mode +
                                    "; it must not be accessible by others (chmod 600)");
  }
  ARYL_ASSIGN_OR_RETURN(std::string secret, ReadKeyFile(key_file));
  char pub[41] = {};
  if (zmq_curve_public(pub, secret.c_str()) != 0)
    return Status::InvalidArgument(key_file + ": cannot derive the public key");
  return KeyPair{pub, secret};
}

Result<std::string> LoadPublicKey(const std::string& pub_file) { return ReadKeyFile(pub_file); }

Result<std::set<std::string>> LoadAllowList(const std::string& path) {
  std::error_code ec;
  std::set<std::string> keys;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".pub") files.push_back(e.path());
    if (ec) return Status::IoError("list '" + path + "': " + ec.message());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      ARYL_ASSIGN_OR_RETURN(std::string key, ReadKeyFile(f.string()));
      keys.insert(key);
    }
    if (keys.empty())
      return Status::InvalidArgument("allow-list directory '" + path + "' has no .pub files");
    return keys;
  }
  ARYL_ASSIGN_OR_RETURN(auto lines, ReadKeyLines(path, "allow-list"));
  for (auto& [lineno, key] : lines) keys.insert(std::move(key));
  if (keys.empty()) return Status::InvalidArgument("allow-list '" + path + "' has no keys");
  return keys;
}

// --- ZapAuthenticator -----------------------------------------------------------------------

class ZapAuthenticator::Impl {
 public:
  zmq::socket_t socket;
  std::mutex mu;
  std::set<std::string> allowed;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> accepted{0}, refused{0};
  std::thread thread;
  std::mutex join_mu;
  bool joined = false;

  bool IsAllowed(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    return allowed.count(key) > 0;
  }

  // One ZAP request (RFC 27): version, request id, domain, address, identity,
  // mechanism, credentials... → version, request id, status code, status text,
  // user id, metadata.
  void HandleOne(std::vector<zmq::message_t>& req) {
    std::string version = req.size() > 0 ? req[0].to_string() : "";
    std::string request_id = req.size() > 1 ? req[1].to_string() : "";
    std::string address = req.size() > 3 ? req[3].to_string() : "?";
    std::string mechanism = req.size() > 5 ? req[5].to_string() : "";
    std::string code = "400", text = "refused", user_id;
    if (version != "1.0" || req.size() < 6) {
      text = "malformed ZAP request";
    } else if (mechanism != "CURVE" || req.size() != 7 || req[6].size() != 32) {
      ++refused;
      spdlog::warn("refused a {} connection from {}: only CURVE clients are accepted", mechanism,
                   address);
      text = "CURVE required";
    } else {
      char z85[41] = {};
      zmq_z85_encode(z85, static_cast<const std::uint8_t*>(req[6].data()), 32);
      if (IsAllowed(z85)) {
        ++accepted;
        code = "200";
        text = "OK";
        user_id = z85;
        spdlog::debug("accepted CURVE client {} from {}", z85, address);
      } else {
        ++refused;
        spdlog::warn("refused CURVE client {} from {}: key not in the allow-list", z85, address);
        text = "key not allowed";
      }
    }
    std::vector<std::string> reply{"1.0", request_id, code, text, user_id, ""};
    for (std::size_t i = 0; i < reply.size(); ++i)
      socket.send(zmq::buffer(reply[i]),
                  i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  void Run() {
    while (!stop) {
      zmq_pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      int rc = zmq_poll(&item, 1, 50);
      if (rc < 0) {
        if (zmq_errno() == ETERM) break;
        continue;
      }
      if (!(item.revents & ZMQ_POLLIN)) continue;
      try {
        std::vector<zmq::message_t> req;
        bool more = true;
        while (more) {
          zmq::message_t part;
          if (!socket.recv(part, zmq::recv_flags::none)) break;
          more = part.more();
          if (req.size() < 16) req.push_back(std::move(part));
        }
        HandleOne(req);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        spdlog::warn("ZAP handler: {}", e.what());
      }
    }
  }
};

Result<std::unique_ptr<ZapAuthenticator>> ZapAuthenticator::Start(zmq::context_t& context,
                                                                  std::set<std::string> allowed) {
  for (const auto& k : allowed)
    if (!IsValidZ85Key(k))
      return Status::InvalidArgument("allow-listed key '" + k + "' is not Z85");
  auto impl = std::make_unique<Impl>();
  impl->allowed = std::move(allowed);
  try {
    impl->socket = zmq::socket_t(context, zmq::socket_type::rep);
    impl->socket.set(zmq::sockopt::linger, 0);
    impl->socket.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE)
      return Status::FailedPrecondition("a ZAP handler already runs in this ZeroMQ context");
    return Status::IoError(std::string("ZAP handler: ") + e.what());
  }
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<ZapAuthenticator>(new ZapAuthenticator(std::move(impl)));
}

ZapAuthenticator::ZapAuthenticator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZapAuthenticator::~ZapAuthenticator() {
  Close();
  Join();
}
void ZapAuthenticator::SetAllowed(std::set<std::string> allowed) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->allowed = std::move(allowed);
}
std::uint64_t ZapAuthenticator::accepted() const { return impl_->accepted.load(); }
std::uint64_t ZapAuthenticator::refused() const { return impl_->refused.load(); }
void ZapAuthenticator::Close() { impl_->stop = true; }
void ZapAuthenticator::Join() {
  std::lock_guard<std::mutex> lock(impl_->join_mu);
  if (impl_->joined) return;
  impl_->joined = true;
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->socket.close();
}

}  // namespace aryl::protocol
