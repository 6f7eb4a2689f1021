// What one attention rank computes in one engine iteration, summarised for operator building.
// Sums over sequences, so the simulator can add and remove sequences in O(1).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace fathom::models {

struct SequenceStep {
  int64_t new_tokens = 0;      // tokens processed this iteration (prefill chunk, 1 decode, or k+1)
  int64_t context_tokens = 0;  // tokens already in the KV cache before this iteration
  bool decode = false;         // generation phase (MLA uses weight absorption)
  bool samples = false;        // produces logits (last prefill chunk or a decode step)
};

// Decode steps without a sliding window, summed one by one: each of `tokens` query tokens after
// `context` cached ones (BatchShape::AddDecodes adds them as their Add calls would).
struct DecodeSums {
  int64_t sequences = 0, tokens = 0;
  int64_t pairs = 0;  // query-key pairs: tokens x context + tokens (tokens + 1) / 2 each
  int64_t kv = 0;     // KV tokens read: context + tokens each
  void Add(int64_t step_tokens, int64_t context) {
    ++sequences;
    tokens += step_tokens;
    pairs += step_tokens * context + step_tokens * (step_tokens + 1) / 2;
    kv += context + step_tokens;
  }
  // `n` sequences' Add calls of `step_tokens` each, their contexts summing to `context_sum`.
  void AddSame(int64_t n, int64_t step_tokens, int64_t context_sum) {
    sequences += n;
    tokens += n * step_tokens;
    pairs += step_tokens * context_sum + n * (step_tokens * (step_tokens + 1) / 2);
    kv += context_sum + n * step_tokens;
  }
};

struct BatchShape {
  int64_t tokens = 0;
  int64_t sequences = 0;
  int64_t sampled_tokens = 0;
  // Prefill chunks: new tokens, query-key pairs (causal) and cached tokens they read.
  int64_t prefill_tokens = 0;
  double prefill_pairs = 0;
  double prefill_pairs_window = 0;  // the same, capped at the sliding window
  double prefill_cached = 0;
  double prefill_cached_window = 0;
  // Decode steps: query tokens, query-key pairs, and KV tokens each step reads.
  int64_t decode_tokens = 0;
  int64_t decode_sequences = 0;
  double decode_pairs = 0;
  double decode_pairs_window = 0;
  double decode_kv = 0;
  double decode_kv_window = 0;
  // The iteration replays a captured CUDA graph (every rank of it: padded to the graph's batch
  // size); otherwise it runs eagerly and pays its launches on the host.
  bool cuda_graph = false;
  // The share of the runtime's per-iteration host work (scheduling, input preparation) this
  // iteration pays: 1 / N in a run of N decode steps scheduled at once (vLLM's multi-step
  // scheduling, EngineConfig::scheduler_steps).
  double host_share = 1;
  // The host prepared this iteration while the GPU ran the one before (vLLM V1's async
  // scheduling, EngineConfig::async_scheduling): its host work overlaps the GPU's instead of
  // adding to it.
  bool host_ahead = false;

  // `window` is the model's sliding window (0 when it has none).
  void Add(const SequenceStep& s, int64_t window) { Accumulate(s, window, 1.0); }
  void Remove(const SequenceStep& s, int64_t window) { Accumulate(s, window, -1.0); }
  // `n` one-token decode steps whose contexts sum to `context_sum` and whose KV tokens, each
  // capped at the sliding window, sum to `window_kv` (context_sum + n without a window): the
  // same as n Add calls.
  void AddDecodeSteps(int64_t n, double context_sum, double window_kv) {
    const double kv = context_sum + static_cast<double>(n);
    tokens += n;
    sequences += n;
    sampled_tokens += n;
    decode_tokens += n;
    decode_sequences += n;
    decode_pairs += kv;
    decode_pairs_window += window_kv;
    decode_kv += kv;
    decode_kv_window += window_kv;
  }
  // Decode steps summed by DecodeSums (no sliding window): the same as an Add call for each.
  void AddDecodes(const DecodeSums& d) {
    tokens += d.tokens;
    sequences += d.sequences;
    sampled_tokens += d.tokens;
    decode_tokens += d.tokens;
    decode_sequences += d.sequences;
    decode_pairs += static_cast<double>(d.pairs);
    decode_pairs_window += static_cast<double>(d.pairs);
    decode_kv += static_cast<double>(d.kv);
    decode_kv_window += static_cast<double>(d.kv);
  }
  // `n` dummy decode sequences of `tokens_each` query tokens and no context, as an engine pads a
  // batch to a captured CUDA graph's size: the same as n Add calls of {tokens_each, 0, decode,
  // samples} for a window of at least tokens_each.
  void AddPadding(int64_t n, int64_t tokens_each) {
    const auto t = static_cast<double>(tokens_each);
    const double pairs = static_cast<double>(n) * t * (t + 1) / 2;
    const double kv = static_cast<double>(n) * t;
    tokens += n * tokens_each;
    sequences += n;
    sampled_tokens += n * tokens_each;
    decode_tokens += n * tokens_each;
    decode_sequences += n;
    decode_pairs += pairs;
    decode_pairs_window += pairs;
    decode_kv += kv;
    decode_kv_window += kv;
  }

 private:
  // Query-key pairs of n new tokens after c cached ones: sum over i=1..n of (c + i), each term
  // capped at w when w > 0.
  static double Pairs(double n, double c, double w) {
    if (w <= 0 || c + n <= w) return n * c + n * (n + 1) / 2;
    const double under = std::max(0.0, w - c);  // tokens whose span stays within the window
    return under * c + under * (under + 1) / 2 + (n - under) * w;
  }
  void Accumulate(const SequenceStep& s, int64_t window, double sign) {
    const double n = static_cast<double>(s.new_tokens);
    const double c = static_cast<double>(s.context_tokens);
    const double w = static_cast<double>(window);
    const double capped_c = window > 0 ? std::min(c, w) : c;
    const int64_t isign = sign > 0 ? 1 : -1;
    tokens += isign * s.new_tokens;
    sequences += isign;
    sampled_tokens += isign * (s.samples ? (s.decode ? s.new_tokens : 1) : 0);
    if (s.decode) {
      decode_tokens += isign * s.new_tokens;
      decode_sequences += isign;
      decode_pairs += sign * Pairs(n, c, 0);
      decode_pairs_window += sign * Pairs(n, c, w);
      decode_kv += sign * (c + n);
      decode_kv_window += sign * std::min(c + n, window > 0 ? w : c + n);
    } else {
      prefill_tokens += isign * s.new_tokens;
      prefill_pairs += sign * Pairs(n, c, 0);
      prefill_pairs_window += sign * Pairs(n, c, w);
      prefill_cached += sign * c;
      prefill_cached_window += sign * capped_c;
    }
  }
};

// The attention ranks of one iteration as an engine that captured CUDA graphs for batch `sizes`
// (ascending) runs them: when every rank only decodes and the largest runs at most the last size,
// the ranks agree on the smallest size that holds the largest and each, an idle one too, is padded
// with dummy sequences of `tokens_each` tokens to it (TensorRT-LLM's model_engine.py
// _get_padded_batch all-gathers the ranks' batch sizes); the iteration replays a graph. Any other
// iteration runs eagerly, as it is.
inline void PadToCudaGraph(std::span<BatchShape> ranks, const std::vector<int64_t>& sizes,
                           int64_t tokens_each) {
  if (sizes.empty()) return;
  int64_t widest = 0;
  for (const BatchShape& shape : ranks) {
    if (shape.prefill_tokens > 0) return;  // a context request: no graph
    widest = std::max(widest, shape.decode_sequences);
  }
  if (widest > sizes.back()) return;
  const int64_t graph = *std::lower_bound(sizes.begin(), sizes.end(), widest);
  for (BatchShape& shape : ranks) {
    shape.AddPadding(graph - shape.decode_sequences, tokens_each);
    shape.cuda_graph = true;
  }
}

}  // namespace fathom::models
