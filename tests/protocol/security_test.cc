#include "aryl/protocol/security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <thread>
#include <zmq.hpp>

#include "aryl/protocol/transport.h"

namespace aryl::protocol {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/aryl-keys-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

KeyPair NewPair() {
  auto k = GenerateKeyPair();
  EXPECT_TRUE(k.ok()) << k.status();
  return *k;
}

std::optional<Message> Echo(const ReplyTo& from, Message) {
  return Ok{.message = from.peer.user_id + "@" + from.peer.address};
}

struct CurveSetup {
  KeyPair server = NewPair();
  KeyPair allowed = NewPair();
  KeyPair stranger = NewPair();
  std::unique_ptr<Server> srv;

  CurveSetup() {
    auto s = Server::Start(
        {.endpoint = "tcp://127.0.0.1:*",
         .curve = CurveServerKeys{server.public_key, server.secret_key, {allowed.public_key}}},
        Echo);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) srv = std::move(*s);
  }

  std::unique_ptr<Client> ClientWith(const KeyPair& k) {
    auto c =
        Client::Connect({.endpoint = srv->endpoint(),
                         .curve = CurveClientKeys{k.public_key, k.secret_key, server.public_key}});
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
};

// A client whose public key is on the allow-list gets in over real tcp; the server
// sees its key and address.
TEST(Curve, ListedClientIsAccepted) {
  CurveSetup setup;
  ASSERT_TRUE(setup.srv);
  auto client = setup.ClientWith(setup.allowed);
  auto r = client->Call<Ok>(ListNodes{}, 2000ms);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->message, setup.allowed.public_key + "@127.0.0.1");
}

// An unknown key is refused by the ZAP handler: the request times out, the server
// never sees it, and a listed client is still served.
TEST(Curve, UnknownClientIsRefused) {
  CurveSetup setup;
  ASSERT_TRUE(setup.srv);
  auto stranger = setup.ClientWith(setup.stranger);
  auto r = stranger->Request(ListNodes{}, 300ms);
  EXPECT_TRUE(r.status().IsTimeout()) << r.status();
  EXPECT_EQ(setup.srv->stats().received, 0u);
  auto friendly = setup.ClientWith(setup.allowed);
  EXPECT_TRUE(friendly->Call<Ok>(ListNodes{}, 2000ms).ok());
}

// A plain (non-CURVE) client cannot talk to a CURVE server.
TEST(Curve, PlainClientIsRefused) {
  CurveSetup setup;
  ASSERT_TRUE(setup.srv);
  auto plain = Client::Connect({.endpoint = setup.srv->endpoint()});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE((*plain)->Request(ListNodes{}, 300ms).status().IsTimeout());
  EXPECT_EQ(setup.srv->stats().received, 0u);
}

// A client that expects another server key fails the handshake.
TEST(Curve, WrongServerKeyFails) {
  CurveSetup setup;
  ASSERT_TRUE(setup.srv);
  KeyPair other = NewPair();
  auto c = Client::Connect({.endpoint = setup.srv->endpoint(),
                            .curve = CurveClientKeys{setup.allowed.public_key,
                                                     setup.allowed.secret_key, other.public_key}});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->Request(ListNodes{}, 300ms).status().IsTimeout());
}

// The authenticator counts refusals and acceptances, takes a new allow-list at run
// time, and is the only one in its context.
TEST(Curve, AuthenticatorCountsAndUpdates) {
  KeyPair server = NewPair(), a = NewPair();
  zmq::context_t ctx;
  auto zap = ZapAuthenticator::Start(ctx, {});
  ASSERT_TRUE(zap.ok()) << zap.status();
  EXPECT_EQ(ZapAuthenticator::Start(ctx, {}).status().code(), Status::Code::kFailedPrecondition);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::curve_server, true);
  router.set(zmq::sockopt::curve_secretkey, server.secret_key);
  router.set(zmq::sockopt::zap_domain, "aryl");
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  auto connect = [&] {
    auto c =
        Client::Connect({.endpoint = endpoint,
                         .curve = CurveClientKeys{a.public_key, a.secret_key, server.public_key}});
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  };
  auto wait_for = [](auto pred) {
    auto deadline = std::chrono::steady_clock::now() + 2s;
    while (!pred() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return pred();
  };
  auto refused_client = connect();
  EXPECT_TRUE(wait_for([&] { return (*zap)->refused() >= 1; }));
  EXPECT_EQ((*zap)->accepted(), 0u);
  refused_client->Close();
  (*zap)->SetAllowed({a.public_key});
  auto accepted_client = connect();
  EXPECT_TRUE(accepted_client->Send(ListNodes{}, 2000ms).ok());
  EXPECT_TRUE(wait_for([&] { return (*zap)->accepted() >= 1; }));
  accepted_client->Close();
  router.close();
  (*zap)->Close();
  (*zap)->Join();
  (*zap)->Join();
}

TEST(Keys, GenerateWritesFilesWithModes) {
  TempDir dir;
  std::string kdir = dir.path() + "/keys";
  ASSERT_TRUE(GenerateKeyPair(kdir, "agent1").ok());
  struct stat st {};
  ASSERT_EQ(::stat((kdir + "/agent1.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(kdir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto pair = LoadKeyPair(kdir + "/agent1.key");
  ASSERT_TRUE(pair.ok()) << pair.status();
  auto pub = LoadPublicKey(kdir + "/agent1.pub");
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(pair->public_key, *pub);
  EXPECT_TRUE(IsValidZ85Key(pair->secret_key));
  // No silent overwrite.
  EXPECT_EQ(GenerateKeyPair(kdir, "agent1").code(), Status::Code::kAlreadyExists);
  EXPECT_TRUE(GenerateKeyPair(kdir, "../evil").IsInvalidArgument());
}

TEST(Keys, SecretKeyReadableByOthersIsRefused) {
  TempDir dir;
  ASSERT_TRUE(GenerateKeyPair(dir.path(), "k").ok());
  ::chmod((dir.path() + "/k.key").c_str(), 0644);
  auto pair = LoadKeyPair(dir.path() + "/k.key");
  EXPECT_TRUE(pair.status().IsPermissionDenied()) << pair.status();
  EXPECT_THAT(pair.status().message(), HasSubstr("0644"));
}

TEST(Keys, AllowListFromDirectoryAndFile) {
  TempDir dir;
  ASSERT_TRUE(GenerateKeyPair(dir.path(), "a").ok());
  ASSERT_TRUE(GenerateKeyPair(dir.path(), "b").ok());
  auto keys = LoadAllowList(dir.path());
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->count(*LoadPublicKey(dir.path() + "/a.pub")));

  std::string list = dir.path() + "/allow.txt";
  std::ofstream(list) << "# clients\n"
                      << *LoadPublicKey(dir.path() + "/a.pub") << "\n\n"
                      << "not-a-key\n";
  auto bad = LoadAllowList(list);
  EXPECT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_THAT(bad.status().message(), HasSubstr("allow.txt:4"));
  std::ofstream(list) << "# clients\n" << *LoadPublicKey(dir.path() + "/b.pub") << "\n";
  auto one = LoadAllowList(list);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  EXPECT_TRUE(LoadAllowList(dir.path() + "/missing").status().IsNotFound());
}

TEST(Keys, Z85Validation) {
  EXPECT_TRUE(IsValidZ85Key(NewPair().public_key));
  EXPECT_FALSE(IsValidZ85Key(""));
  EXPECT_FALSE(IsValidZ85Key(std::string(40, ' ')));
  EXPECT_FALSE(IsValidZ85Key(std::string(41, 'a')));
}

}  // namespace
}  // namespace aryl::protocol
