// Paged KV cache of one attention rank, with an optional prefix cache of Mooncake-style
// 512-token blocks (LRU eviction of blocks no running request uses).
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace fathom::sim {

class KvCacheManager {
 public:
  // `capacity_blocks` blocks of `block_tokens` tokens each; prefix caching keeps finished
  // prompts' 512-token blocks for reuse when `prefix_caching`.
  KvCacheManager(int64_t capacity_blocks, int64_t block_tokens, bool prefix_caching);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t capacity_blocks() const { return capacity_; }
  int64_t free_blocks() const { return free_; }
  int64_t used_blocks() const { return capacity_ - free_; }
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }

  // Takes `n` blocks, evicting unused prefix blocks (least recently used first) when needed.
  // False, taking nothing, when even eviction cannot free enough.
  bool Allocate(int64_t n);
  void Release(int64_t n);
  // Blocks Allocate(n) could get right now (free plus evictable).
  int64_t Available() const { return free_ + evictable_blocks_; }
  // Whether Allocate(n) would succeed now; like Allocate, it counts toward free_slack.
  bool Fits(int64_t n) const;
  // The least free blocks, less those asked for, that any Fits or Allocate saw: negative once one
  // failed or had to evict. A cache with capacity_blocks - free_slack() blocks or more would have
  // answered every one the same (tuner/search's runs shared between batch limits).
  int64_t free_slack() const { return free_slack_; }

  // Prefix cache. `hashes` are a prompt's prefix-block ids. Returns how many leading blocks are
  // cached and pins them (the caller releases them with Unpin when the request ends).
  int64_t MatchAndPin(const std::vector<uint64_t>& hashes);
  // Counts cached leading blocks without pinning (for prefix-aware routing).
  int64_t Peek(const std::vector<uint64_t>& hashes) const;
  void Unpin(const std::vector<uint64_t>& hashes, int64_t count);
  // Hands the first `count` prefix blocks of a finished prefill to the cache: blocks already
  // cached are shared (the duplicate KV blocks are freed), the others are inserted, pinned by the
  // caller. Returns the KV blocks the request no longer owns.
  int64_t Insert(const std::vector<uint64_t>& hashes, int64_t from, int64_t count);
  int64_t prefix_block_kv_blocks() const { return kv_blocks_per_prefix_block_; }

  int64_t lookups() const { return lookups_; }
  int64_t hits() const { return hits_; }

 private:
  struct Entry {
    int64_t pins = 0;
    std::list<uint64_t>::iterator lru;  // valid when pins == 0
  };
  void Pin(uint64_t hash, Entry& e);
  bool EvictOne();

  int64_t capacity_;
  int64_t block_tokens_;
  bool prefix_caching_;
  int64_t kv_blocks_per_prefix_block_;
  int64_t free_;
  int64_t evictable_blocks_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // unpinned entries, least recently used first
  int64_t lookups_ = 0, hits_ = 0;
  mutable int64_t free_slack_ = INT64_MAX;
};

}  // namespace fathom::sim
