#include "aryl/protocol/messages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "samples.h"

namespace aryl::protocol {
namespace {

using ::testing::HasSubstr;

class RoundTrip : public ::testing::TestWithParam<Message> {};

// Every message survives Encode then Decode unchanged, and carries v and type.
TEST_P(RoundTrip, EncodeDecodeIsIdentity) {
  const Message& original = GetParam();
  std::string frame = Encode(original);
  auto j = nlohmann::json::parse(frame);
  EXPECT_EQ(j["v"], kProtocolVersion);
  EXPECT_EQ(j["type"], std::string(TypeName(original)));
  auto decoded = Decode(frame);
  ASSERT_TRUE(decoded.ok()) << decoded.status() << "\nframe: " << frame;
  EXPECT_EQ(decoded->index(), original.index());
  EXPECT_TRUE(*decoded == original) << frame << "\n" << Encode(*decoded);
  EXPECT_EQ(Encode(*decoded), frame);
}

INSTANTIATE_TEST_SUITE_P(AllMessages, RoundTrip, ::testing::ValuesIn(testing::SampleMessages()),
                         [](const auto& info) { return std::string(TypeName(info.param)); });

// The samples cover every alternative of Message.
TEST(Messages, SamplesCoverEveryType) {
  std::set<std::size_t> seen;
  for (const auto& m : testing::SampleMessages()) seen.insert(m.index());
  EXPECT_EQ(seen.size(), std::variant_size_v<Message>);
  EXPECT_EQ(AllTypeNames().size(), std::variant_size_v<Message>);
}

// Type names are unique.
TEST(Messages, TypeNamesAreUnique) {
  auto names = AllTypeNames();
  std::set<std::string_view> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
}

// Default-constructed optional fields may be omitted from the frame.
TEST(Messages, OptionalFieldsMayBeAbsent) {
  auto r = Decode(R"({"v":1,"type":"store_reply"})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& reply = std::get<StoreReply>(*r);
  EXPECT_FALSE(reply.value);
  EXPECT_FALSE(reply.number);
  EXPECT_FALSE(reply.flag);
}

// A NaN loss (a diverged run) travels as null and comes back as NaN.
TEST(Messages, NanLossRoundTrips) {
  JobProgress p{.job = 1, .step = 3, .loss = std::nan("")};
  auto frame = Encode(p);
  EXPECT_THAT(frame, HasSubstr("\"loss\":null"));
  auto r = DecodeAs<JobProgress>(frame);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(std::isnan(r->loss));
}

// Invalid UTF-8 inside a string is replaced on encode instead of throwing.
TEST(Messages, InvalidUtf8IsReplacedNotThrown) {
  Ok ok{.message = std::string("bad \xff\xfe byte")};
  std::string frame = Encode(ok);
  auto r = DecodeAs<Ok>(frame);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->message, HasSubstr("bad "));
}

// DecodeAs turns an Error reply into the matching Status, and a wrong type into
// InvalidArgument naming both types.
TEST(Messages, DecodeAsMapsErrorsAndWrongTypes) {
  auto timeout = DecodeAs<StoreReply>(Encode(Error::FromStatus(Status::Timeout("keys a, b"))));
  EXPECT_TRUE(timeout.status().IsTimeout());
  EXPECT_EQ(timeout.status().message(), "keys a, b");
  auto wrong = DecodeAs<StoreReply>(Encode(Ok{}));
  EXPECT_TRUE(wrong.status().IsInvalidArgument());
  EXPECT_THAT(wrong.status().message(), HasSubstr("store_reply"));
  EXPECT_THAT(wrong.status().message(), HasSubstr("'ok'"));
}

// Every Status code survives Error::FromStatus / ToStatus.
TEST(Messages, ErrorCodesRoundTrip) {
  for (auto s : {Status::InvalidArgument("a"), Status::NotFound("b"), Status::AlreadyExists("c"),
                 Status::FailedPrecondition("d"), Status::OutOfRange("e"), Status::Corruption("f"),
                 Status::Timeout("g"), Status::Unavailable("h"), Status::IoError("i"),
                 Status::PermissionDenied("j"), Status::Cancelled("k"), Status::Internal("l")}) {
    auto r = DecodeAs<Error>(Encode(Error::FromStatus(s)));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ToStatus(), s);
  }
}

struct Malformed {
  std::string name;
  std::string frame;
  std::string expect;  // substring of the error message (names the field)
  friend void PrintTo(const Malformed& m, std::ostream* os) { *os << m.name; }
};

std::string Big() {
  std::string s = R"({"v":1,"type":"ok","message":")";
  s += std::string(kMaxFrameBytes, 'x');
  s += "\"}";
  return s;
}

std::vector<Malformed> MalformedFrames() {
  const std::string sw_head = R"({"v":1,"type":"start_workers","job":1,"generation":0,)";
  const std::string sw_tail =
      R"("members":[7],"argv":["a"],"env":{},"cwd":"","checkpoint_dir":"","store_endpoint":"e","store_prefix":"","term":0})";
  return {
      {"Empty", "", "empty frame"},
      {"Oversize", Big(), "exceeds the limit of 1048576 bytes"},
      {"InvalidJson", R"({"v":1,"type":)", "invalid JSON"},
      {"TrailingGarbage", R"({"v":1,"type":"ok","message":""} x)", "invalid JSON"},
      {"NotObject", "[1,2,3]", "not a JSON object"},
      {"TooDeep", std::string(100, '[') + std::string(100, ']'), "nested deeper"},
      {"MissingVersion", R"({"type":"ok","message":""})", "missing field 'v'"},
      {"BadVersion", R"({"v":2,"type":"ok","message":""})",
       "field 'v': unsupported protocol version 2"},
      {"VersionNotInteger", R"({"v":"1","type":"ok","message":""})", "field 'v'"},
      {"MissingType", R"({"v":1,"message":""})", "missing field 'type'"},
      {"TypeNotString", R"({"v":1,"type":5})", "field 'type': expected string"},
      {"UnknownType", R"({"v":1,"type":"launch_missiles"})",
       "field 'type': unknown message type \"launch_missiles\""},
      {"MissingField", R"({"v":1,"type":"cancel_job"})", "cancel_job: missing field 'job'"},
      {"WrongTypeString", R"({"v":1,"type":"cancel_job","job":"12"})",
       "field 'job': expected integer"},
      {"NegativeJob", R"({"v":1,"type":"cancel_job","job":-3})",
       "field 'job': expected integer >= 0, got -3"},
      {"FloatForInteger",
       R"({"v":1,"type":"agent_register","agent_id":"a","host":"h","pool":"training","gpu_type":"cpu","slots":1.5,"workers":[],"store_endpoint":"","cluster_id":""})",
       "field 'slots': expected integer in [1, 4096], got 1.5"},
      {"ZeroSlots",
       R"({"v":1,"type":"agent_register","agent_id":"a","host":"h","pool":"training","gpu_type":"cpu","slots":0,"workers":[],"store_endpoint":"","cluster_id":""})",
       "field 'slots': expected integer in [1, 4096], got 0"},
      {"EmptyAgentId",
       R"({"v":1,"type":"agent_register","agent_id":"","host":"h","pool":"training","gpu_type":"cpu","slots":1,"workers":[],"store_endpoint":"","cluster_id":""})",
       "field 'agent_id': expected non-empty string"},
      {"BadEnum",
       R"({"v":1,"type":"agent_register","agent_id":"a","host":"h","pool":"gaming","gpu_type":"cpu","slots":1,"workers":[],"store_endpoint":"","cluster_id":""})",
       "field 'pool': expected one of training|inference, got \"gaming\""},
      {"NestedOutOfRange",
       R"({"v":1,"type":"agent_register","agent_id":"a","host":"h","pool":"training","gpu_type":"cpu","slots":1,"workers":[{"job":1,"worker":1,"generation":0,"rank":-1,"local_slot":0,"pid":5}],"store_endpoint":"","cluster_id":""})",
       "field 'workers[0].rank': expected integer >= 0, got -1"},
      {"NestedUnknown",
       R"({"v":1,"type":"agent_register","agent_id":"a","host":"h","pool":"training","gpu_type":"cpu","slots":1,"workers":[{"job":1,"worker":1,"generation":0,"rank":0,"local_slot":0,"pid":5,"x":1}],"store_endpoint":"","cluster_id":""})",
       "unknown field 'workers[0].x'"},
      {"UnknownField", R"({"v":1,"type":"cancel_job","job":1,"force":true})",
       "cancel_job: unknown field 'force'"},
      {"NullRequired", R"({"v":1,"type":"cancel_job","job":null})",
       "field 'job': expected integer"},
      {"HugeInteger", R"({"v":1,"type":"store_add","key":"k","delta":18446744073709551615,"token":""})",
       "field 'delta': expected 64-bit integer"},
      {"NanNotAllowed",
       R"({"v":1,"type":"stop_workers","job":1,"workers":[],"grace_seconds":null,"checkpoint_first":false,"reason":""})",
       "field 'grace_seconds': expected number"},
      {"Infinity",
       R"({"v":1,"type":"stop_workers","job":1,"workers":[],"grace_seconds":1e999,"checkpoint_first":false,"reason":""})",
       "invalid JSON"},
      {"NegativeGrace",
       R"({"v":1,"type":"stop_workers","job":1,"workers":[],"grace_seconds":-1,"checkpoint_first":false,"reason":""})",
       "field 'grace_seconds': expected number in [0, 86400], got -1"},
      {"BoolAsInt",
       R"({"v":1,"type":"stop_workers","job":1,"workers":[],"grace_seconds":1,"checkpoint_first":1,"reason":""})",
       "field 'checkpoint_first': expected boolean, got 1"},
      {"EmptyWorkers", sw_head + R"("workers":[],)" + sw_tail,
       "field 'workers': expected non-empty array"},
      {"WorkerNotMember",
       sw_head + R"("workers":[{"worker":8,"rank":0,"local_slot":0}],)" + sw_tail,
       "field 'workers[0].rank'"},
      {"EnvNotStrings",
       R"({"v":1,"type":"submit_job","name":"","workers":1,"gpu_type":"","argv":["a"],"env":{"A":1},"checkpoint_dir":"","cwd":"","model":"","total_work":0})",
       "field 'env.A': expected string"},
      {"SubmitNoSize",
       R"({"v":1,"type":"submit_job","name":"","gpu_type":"","argv":["a"],"env":{},"checkpoint_dir":"","cwd":"","model":"","total_work":0})",
       "field 'workers'"},
      {"SubmitMinAboveMax",
       R"({"v":1,"type":"submit_job","name":"","min_workers":4,"max_workers":2,"gpu_type":"","argv":["a"],"env":{},"checkpoint_dir":"","cwd":"","model":"","total_work":0})",
       "field 'min_workers'"},
      {"SubmitNegativeWorkers",
       R"({"v":1,"type":"submit_job","name":"","workers":-3,"gpu_type":"","argv":["a"],"env":{},"checkpoint_dir":"","cwd":"","model":"","total_work":0})",
       "field 'workers': expected integer in [1, 65536], got -3"},
      {"SubmitEmptyArgv0",
       R"({"v":1,"type":"submit_job","name":"","workers":1,"gpu_type":"","argv":[""],"env":{},"checkpoint_dir":"","cwd":"","model":"","total_work":0})",
       "field 'argv[0]'"},
      {"ExitedNeither",
       R"({"v":1,"type":"worker_exited","agent_id":"a","job":1,"worker":0,"generation":0,"outcome":"","runtime":false,"error":""})",
       "field 'exit_code'"},
      {"DoneBadOutcome",
       R"({"v":1,"type":"worker_done","job":1,"worker":0,"generation":1,"step":5,"outcome":"finished","message":""})",
       "field 'outcome'"},
      {"ReclaimNothing",
       R"({"v":1,"type":"pool_reclaim","count":0,"servers":[],"deadline_seconds":5})",
       "field 'count'"},
      {"ErrorOkCode", R"({"v":1,"type":"error","code":"OK","message":""})", "field 'code'"},
      {"DuplicateMembers",
       R"({"v":1,"type":"generation_announce","job":1,"generation":1,"members":[1,1],"store_endpoint":"e","store_prefix":""})",
       "field 'members[1]': duplicate worker 1"},
      {"BadBase64", R"({"v":1,"type":"store_set","key":"k","value":"!!!!","token":""})",
       "field 'value': expected base64 string"},
      {"EmptyWaitKey", R"({"v":1,"type":"store_wait","keys":["a",""],"timeout_ms":5,"token":""})",
       "field 'keys[1]': expected non-empty string"},
      {"InvalidUtf8", std::string(R"({"v":1,"type":"ok","message":")") + "\xff\"}", "invalid JSON"},
  };
}

class MalformedTest : public ::testing::TestWithParam<Malformed> {};

// Each malformed frame is rejected with InvalidArgument naming the problem and field.
TEST_P(MalformedTest, RejectedWithPreciseError) {
  const auto& c = GetParam();
  auto r = Decode(c.frame);
  ASSERT_FALSE(r.ok()) << "accepted: " << c.frame.substr(0, 200);
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(c.expect));
  EXPECT_LT(r.status().message().size(), 512u);  // never echoes a whole frame
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedTest, ::testing::ValuesIn(MalformedFrames()),
                         [](const auto& info) { return info.param.name; });

// A frame of exactly the limit is not rejected for its size.
TEST(Messages, FrameAtLimitIsNotRejectedForSize) {
  std::string head = R"({"v":1,"type":"ok","message":")";
  std::string frame = head + std::string(kMaxFrameBytes - head.size() - 2, 'y') + "\"}";
  ASSERT_EQ(frame.size(), kMaxFrameBytes);
  auto r = Decode(frame);
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace aryl::protocol
