#include "sim/kv_cache.h"

#include <catch2/catch.hpp>

namespace fathom::sim {

TEST_CASE("KvCacheManager: blocks never exceed capacity", "[sim]") {
  KvCacheManager kv(100, 16, false);
  CHECK(kv.BlocksFor(1) == 1);
  CHECK(kv.BlocksFor(16) == 1);
  CHECK(kv.BlocksFor(17) == 2);
  CHECK(kv.Allocate(60));
  CHECK_FALSE(kv.Allocate(41));
  CHECK(kv.free_blocks() == 40);
  CHECK(kv.Allocate(40));
  CHECK(kv.free_blocks() == 0);
  kv.Release(100);
  CHECK(kv.free_blocks() == 100);
}

TEST_CASE("KvCacheManager: prefix blocks are shared, pinned while used, evicted LRU", "[sim]") {
  KvCacheManager kv(64, 32, true);  // 16 KV blocks per 512-token prefix block
  const std::vector<uint64_t> a = {1, 2, 3};
  const std::vector<uint64_t> b = {1, 2, 9};
  CHECK(kv.MatchAndPin(a) == 0);
  REQUIRE(kv.Allocate(48));         // request a's prompt: 3 prefix blocks
  CHECK(kv.Insert(a, 0, 3) == 48);  // handed to the cache, pinned by a
  CHECK(kv.free_blocks() == 16);
  CHECK(kv.Peek(b) == 2);
  CHECK(kv.MatchAndPin(b) == 2);
  CHECK(kv.hits() == 2);
  CHECK(kv.Available() == 16);  // everything cached is pinned
  kv.Unpin(a, 3);
  CHECK(kv.Available() == 32);  // block 3 is evictable now; 1 and 2 are still pinned by b
  REQUIRE(kv.Allocate(32));     // evicts block 3
  CHECK(kv.Peek(a) == 2);
  kv.Unpin(b, 2);
  CHECK(kv.Available() == 32);
  kv.Release(32);
  CHECK(kv.Available() == 64);
}

}  // namespace fathom::sim
