// CoalesceWrites: a list of puts and deletes, in the order a caller meant
// them, rewritten as one etcd transaction accepts them.
//
// etcd refuses a transaction ("etcdserver: duplicate key given in txn
// request") that puts one key twice, or puts a key that one of its deletes
// covers, whatever their order. A batch of state writes does both: a node
// record upserted twice in one step, a core journal row appended and then
// dropped by the snapshot that replaces it. The rewrite has the same effect as
// the ops applied one after another:
//  1. a put replaces an earlier put of its key (the last write wins);
//  2. a delete drops the earlier puts it covers (it would undo them);
//  3. a put carves its key out of the earlier deletes that cover it (the put
//     comes after them, so the key ends with the put's value).
// Reads (Op::Kind::kRange) pass through in place. O(n log n) for n puts
// against a handful of deletes.
#pragma once

#include <vector>

#include "state/etcd/etcd_client.h"

namespace aryl::etcd {

std::vector<Op> CoalesceWrites(std::vector<Op> ops);

}  // namespace aryl::etcd
