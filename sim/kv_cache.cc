#include "sim/kv_cache.h"

#include <algorithm>

#include "base/check.h"
#include "traces/request.h"

namespace fathom::sim {

KvCacheManager::KvCacheManager(int64_t capacity_blocks, int64_t block_tokens, bool prefix_caching)
    : capacity_(capacity_blocks),
      block_tokens_(block_tokens),
      prefix_caching_(prefix_caching),
      kv_blocks_per_prefix_block_((traces::kPrefixBlockTokens + block_tokens - 1) / block_tokens),
      free_(capacity_blocks) {}

bool KvCacheManager::EvictOne() {
  if (lru_.empty()) return false;
  const uint64_t hash = lru_.front();
  lru_.pop_front();
  entries_.erase(hash);
  evictable_blocks_ -= kv_blocks_per_prefix_block_;
  free_ += kv_blocks_per_prefix_block_;
  return true;
}

bool KvCacheManager::Fits(int64_t n) const {
  free_slack_ = std::min(free_slack_, free_ - n);
  return n <= Available();
}

bool KvCacheManager::Allocate(int64_t n) {
  if (!Fits(n)) return false;
  while (free_ < n) FATHOM_CHECK(EvictOne());
  free_ -= n;
  return true;
}

void KvCacheManager::Release(int64_t n) {
  free_ += n;
  FATHOM_CHECK(free_ + evictable_blocks_ <= capacity_);
}

void KvCacheManager::Pin(uint64_t hash, Entry& e) {
  if (e.pins++ == 0) {
    lru_.erase(e.lru);
    evictable_blocks_ -= kv_blocks_per_prefix_block_;
  }
}

int64_t KvCacheManager::Peek(const std::vector<uint64_t>& hashes) const {
  if (!prefix_caching_) return 0;
  int64_t n = 0;
  for (uint64_t h : hashes) {
    if (entries_.find(h) == entries_.end()) break;
    ++n;
  }
  return n;
}

int64_t KvCacheManager::MatchAndPin(const std::vector<uint64_t>& hashes) {
  if (!prefix_caching_) return 0;
  lookups_ += static_cast<int64_t>(hashes.size());
  int64_t n = 0;
  for (uint64_t h : hashes) {
    auto it = entries_.find(h);
    if (it == entries_.end()) break;
    Pin(h, it->second);
    ++n;
  }
  hits_ += n;
  return n;
}

void KvCacheManager::Unpin(const std::vector<uint64_t>& hashes, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    auto it = entries_.find(hashes[i]);
    FATHOM_CHECK(it != entries_.end() && it->second.pins > 0);
    if (--it->second.pins == 0) {
      it->second.lru = lru_.insert(lru_.end(), hashes[i]);
      evictable_blocks_ += kv_blocks_per_prefix_block_;
    }
  }
}

int64_t KvCacheManager::Insert(const std::vector<uint64_t>& hashes, int64_t from, int64_t count) {
  int64_t handed_over = 0;
  for (int64_t i = from; i < count; ++i) {
    auto [it, inserted] = entries_.try_emplace(hashes[i]);
    if (inserted) {
      it->second.pins = 1;  // the request's own blocks become the cache's, pinned by it
    } else {
      Pin(hashes[i], it->second);  // another request cached it meanwhile: share, free ours
      free_ += kv_blocks_per_prefix_block_;
    }
    handed_over += kv_blocks_per_prefix_block_;
  }
  return handed_over;
}

}  // namespace fathom::sim
