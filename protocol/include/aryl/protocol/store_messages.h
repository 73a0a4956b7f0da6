// Rendezvous store messages: set, get, add, compare-and-set, wait, check,
// delete and the reply (messages.h, step 17).
// Part of messages.h (which includes this file before its message list);
// include messages.h.
#pragma once

#ifndef ARYL_PROTOCOL_MESSAGES_H_PARTS
#error "include aryl/protocol/messages.h, not aryl/protocol/store_messages.h"
#endif

namespace aryl::protocol {

struct StoreSet {
  static constexpr std::string_view kType = "store_set";
  std::string key{};
  Bytes value{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("value", value);
    v("token", token);
  }
  bool operator==(const StoreSet&) const = default;
};

// Waits up to timeout_ms for the key to exist (0 = answer at once: NotFound).
struct StoreGet {
  static constexpr std::string_view kType = "store_get";
  std::string key{};
  std::int64_t timeout_ms = 0;
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("timeout_ms", timeout_ms, {.min = 0, .max = 86400000});
    v("token", token);
  }
  bool operator==(const StoreGet&) const = default;
};

// Adds delta to the integer stored at key (missing = 0); replies the new value.
struct StoreAdd {
  static constexpr std::string_view kType = "store_add";
  std::string key{};
  std::int64_t delta = 0;
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("delta", delta);
    v("token", token);
  }
  bool operator==(const StoreAdd&) const = default;
};

// Sets key to desired when its value equals expected (or it is missing and expected
// is empty); replies the value now stored.
struct StoreCompareSet {
  static constexpr std::string_view kType = "store_compare_set";
  std::string key{};
  Bytes expected{};
  Bytes desired{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("expected", expected);
    v("desired", desired);
    v("token", token);
  }
  bool operator==(const StoreCompareSet&) const = default;
};

// Waits until every key exists; Error{Timeout} after timeout_ms.
struct StoreWait {
  static constexpr std::string_view kType = "store_wait";
  std::vector<std::string> keys{};
  std::int64_t timeout_ms = 0;
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("keys", keys, {.non_empty = true, .elem_non_empty = true});
    v("timeout_ms", timeout_ms, {.min = 0, .max = 86400000});
    v("token", token);
  }
  bool operator==(const StoreWait&) const = default;
};

// Replies flag = whether every key exists, without waiting.
struct StoreCheck {
  static constexpr std::string_view kType = "store_check";
  std::vector<std::string> keys{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("keys", keys, {.non_empty = true, .elem_non_empty = true});
    v("token", token);
  }
  bool operator==(const StoreCheck&) const = default;
};

// Replies flag = whether the key existed.
struct StoreDeleteKey {
  static constexpr std::string_view kType = "store_delete_key";
  std::string key{};
  std::string token{};  // the job's store token (store.h); empty without one
  template <typename V>
  void Visit(V& v) {
    v("key", key, {.non_empty = true});
    v("token", token);
  }
  bool operator==(const StoreDeleteKey&) const = default;
};

// The answer to every store request: `value` for get/compare_set, `number` for add,
// `flag` for check/delete_key; set and wait leave all three empty.
struct StoreReply {
  static constexpr std::string_view kType = "store_reply";
  std::optional<Bytes> value{};
  std::optional<std::int64_t> number{};
  std::optional<bool> flag{};
  template <typename V>
  void Visit(V& v) {
    v("value", value);
    v("number", number);
    v("flag", flag);
  }
  bool operator==(const StoreReply&) const = default;
};

}  // namespace aryl::protocol
