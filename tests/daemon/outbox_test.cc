#include "outbox.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace aryl::daemon {
namespace {

namespace p = aryl::protocol;

p::Message Msg(const std::string& text) {
  p::Error e;
  e.message = text;
  return e;
}

// An Outbox over an in-memory SQLite store that records what it delivers.
struct Fixture {
  std::unique_ptr<StateStore> store = [] {
    auto s = StateStore::Open(":memory:");
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(*s);
  }();
  std::vector<std::string> sent;  // "identity:message"
  Outbox outbox{[this](const std::string& identity, const p::Message& msg) {
    sent.push_back(identity + ":" + std::get<p::Error>(msg).message);
  }};
  std::optional<std::string> Meta(const std::string& key) { return *store->GetMeta(key); }
};

// Outside a step a message goes at once.
TEST(Outbox, SendOutsideAStepDeliversAtOnce) {
  Fixture f;
  f.outbox.Send("a", Msg("hello"));
  EXPECT_EQ(f.sent, std::vector<std::string>{"a:hello"});
  EXPECT_FALSE(f.outbox.open());
}

// A committed step's messages go after its writes, in the order sent.
TEST(Outbox, CommittedStepDeliversAfterTheWrites) {
  Fixture f;
  Status st = f.outbox.Run(*f.store, [&] {
    f.outbox.Send("a", Msg("1"));
    EXPECT_TRUE(f.outbox.open());
    EXPECT_TRUE(f.sent.empty());  // held
    f.outbox.Send("b", Msg("2"));
    EXPECT_EQ(f.outbox.held(), 2u);
    return f.store->SetMeta("k", "v");
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(f.sent, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(f.Meta("k"), "v");
  EXPECT_EQ(f.outbox.held(), 0u);
  EXPECT_FALSE(f.outbox.open());
}

// A failed step happened not at all: no write, no message.
TEST(Outbox, FailedStepDropsItsMessagesAndWrites) {
  Fixture f;
  Status st = f.outbox.Run(*f.store, [&] {
    EXPECT_TRUE(f.store->SetMeta("k", "v").ok());
    f.outbox.Send("a", Msg("1"));
    return Status::IoError("disk full");
  });
  EXPECT_TRUE(st.IsIoError());
  EXPECT_TRUE(f.sent.empty());
  EXPECT_EQ(f.Meta("k"), std::nullopt);
  EXPECT_EQ(f.outbox.held(), 0u);
  // The next step starts empty.
  ASSERT_TRUE(f.outbox
                  .Run(*f.store,
                       [&] {
                         f.outbox.Send("b", Msg("2"));
                         return Status::Ok();
                       })
                  .ok());
  EXPECT_EQ(f.sent, std::vector<std::string>{"b:2"});
}

// A step within a step is part of the outer one: its messages wait for the
// outer commit, and the outer failure drops them.
TEST(Outbox, NestedStepIsPartOfTheOuterOne) {
  Fixture f;
  Status st = f.outbox.Run(*f.store, [&] {
    Status inner = f.outbox.Run(*f.store, [&] {
      f.outbox.Send("a", Msg("inner"));
      return f.store->SetMeta("inner", "1");
    });
    EXPECT_TRUE(inner.ok());
    EXPECT_TRUE(f.sent.empty());
    EXPECT_TRUE(f.outbox.open());
    return Status::IoError("later write failed");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(f.sent.empty());
  EXPECT_EQ(f.Meta("inner"), std::nullopt);
}

}  // namespace
}  // namespace aryl::daemon
