// CURVE security: key pairs, key files, allow-lists and the ZAP handler.
//
// Setup (see docs/protocol.md):
//  1. `aryl keygen DIR NAME` (GenerateKeyPair) on every host: DIR/NAME.key holds
//     the secret key (mode 0600), DIR/NAME.pub the public key.
//  2. The scheduler gets its own pair; its .pub goes to every agent and client.
//  3. The scheduler's allow-list is a directory of the agents' and clients' .pub
//     files (or one file, one key per line).
//  4. A CURVE Server runs a ZapAuthenticator: libzmq hands it each handshake over
//     inproc://zeromq.zap.01 (the ZAP protocol, RFC 27); it answers 200 for a key in
//     the allow-list and 400 otherwise, logging each refusal with the peer address.
//     A refused client never completes its handshake, so its requests time out.
//
// Key file format: text, '#' comment lines, and one line holding a 40-character Z85
// key (the secret key in .key, the public key in .pub).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "aryl/result.h"
#include "aryl/status.h"

namespace zmq {
class context_t;
}

namespace aryl::protocol {

struct KeyPair {
  std::string public_key{};  // Z85, 40 characters
  std::string secret_key{};  // Z85, 40 characters
};

// True for a 40-character Z85 string (a 32-byte CURVE key).
bool IsValidZ85Key(std::string_view key);

// A fresh key pair in memory. Fails when libzmq was built without CURVE.
Result<KeyPair> GenerateKeyPair();
// Writes DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub. Creates DIR (0700) when
// missing; refuses (AlreadyExists) to overwrite an existing key.
Status GenerateKeyPair(const std::string& dir, const std::string& name);
// Reads a .key file; the public key is derived from the secret one.
Result<KeyPair> LoadKeyPair(const std::string& key_file);
// Reads a .pub file.
Result<std::string> LoadPublicKey(const std::string& pub_file);
// A directory: every *.pub file in it. A file: one Z85 key per line ('#' comments).
Result<std::set<std::string>> LoadAllowList(const std::string& path);

// Answers ZAP requests for one ZeroMQ context. One per context (libzmq allows one
// ZAP endpoint per context); start it before binding CURVE sockets.
// Thread safety: SetAllowed and the counters may be used from any thread.
class ZapAuthenticator {
 public:
  // Binds inproc://zeromq.zap.01 in `context` and starts the handler thread.
  static Result<std::unique_ptr<ZapAuthenticator>> Start(zmq::context_t& context,
                                                         std::set<std::string> allowed);
  ~ZapAuthenticator();  // Close() + Join()
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  void SetAllowed(std::set<std::string> allowed);
  std::uint64_t accepted() const;
  std::uint64_t refused() const;

  // Two-step shutdown: Close() asks the thread to stop; Join() waits for it.
  void Close();
  void Join();

  class Impl;

 private:
  explicit ZapAuthenticator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aryl::protocol
