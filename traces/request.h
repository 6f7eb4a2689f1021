// One inference request of a workload, as every trace reader produces it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace fathom::traces {

struct Request {
  int64_t id = 0;                   // position in the stream, from 0
  std::optional<double> arrival_s;  // seconds from the trace's start; none for length-only sets
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  // Ids of the prompt's 512-token prefix blocks (Mooncake hash_ids); equal leading ids mean a
  // shared prefix. Empty when the trace does not carry them.
  std::vector<uint64_t> prefix_blocks;
};

// Mooncake's prefix-block size in tokens.
inline constexpr int64_t kPrefixBlockTokens = 512;

}  // namespace fathom::traces
