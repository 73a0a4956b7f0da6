// EtcdStoreTest: a real etcd member on loopback (skipped without one), a
// client to it, and an EtcdStateStore opened under a term; the fixture of
// etcd_state_store_test.cc and etcd_core_snapshot_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "etcd_cluster.h"
#include "state/etcd/etcd_client.h"
#include "state/etcd/etcd_state_store.h"

namespace aryl::daemon {

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!livetest::EtcdCluster::Available()) GTEST_SKIP() << livetest::EtcdCluster::kMissing;
    ASSERT_TRUE(etcd_.Start(1).ok()) << etcd_.Log(0);
    auto url = etcd::ParseEtcdUrl(etcd_.EtcdUrl("aryl-store-test"));
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    etcd::ClientOptions o;
    o.endpoints = url_.endpoints;
    auto c = etcd::Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  // Makes this test the leader: a leader key, and its create revision.
  std::int64_t Lead() {
    etcd::TxnRequest txn;
    txn.success.push_back(etcd::Op::Put(url_.prefix + "leader", "{\"endpoint\":\"test\"}"));
    auto r = client_->Txn(txn);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->revision : 0;
  }

  Result<std::unique_ptr<EtcdStateStore>> Open(std::int64_t term, std::string* deposed = nullptr) {
    EtcdStateStore::Options o;
    o.location = "test";
    o.prefix = url_.prefix;
    o.term = term;
    o.on_deposed = [deposed](const std::string& why) {
      if (deposed) *deposed = why;
    };
    o.max_txn_bytes = 64 * 1024;  // so the big snapshot needs several transactions
    return EtcdStateStore::Open(client_, o);
  }

  livetest::EtcdCluster etcd_;
  etcd::EtcdUrl url_;
  std::shared_ptr<etcd::Client> client_;
};

}  // namespace aryl::daemon
