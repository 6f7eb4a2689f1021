// Per-request state while a request is inside the simulated cluster.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/sim_time.h"

namespace fathom::sim {

// The fields a decode step reads and writes come first, in one cache line (a step visits every
// running sequence, in no order the memory follows).
struct alignas(64) Sequence {
  // Tokens whose KV is stored, and the KV length at which the next token is sampled (input plus
  // tokens generated before the last admission). kv_len < prefill_target means prefilling.
  int64_t kv_len = 0;
  int64_t prefill_target = 0;
  int64_t generated = 0;
  int64_t output = 0;
  int64_t owned_blocks = 0;   // KV blocks held outside the prefix cache
  int64_t pinned_prefix = 0;  // leading prefix-cache blocks pinned by this request
  int64_t kv_high = 0;        // longest KV ever held: prompt tokens below it were computed before
  // In one of its rank's decode cohorts (>= 0): kv_len, generated and owned_blocks are as of
  // that cohort's step `cohort_mark` (Engine::Sync brings them up to date).
  int cohort = -1;
  bool in_flight = false;  // part of a batch still in the pipeline
  bool has_first_token = false;
  bool ttft_violation_counted = false, tpot_violation_counted = false;  // counted before the fact

  int64_t request_id = 0;
  int64_t issue_index = 0;  // order of issue, from 0
  SimTime scheduled{0};     // LoadGen's scheduled issue time: latencies count from here
  SimTime first_token{0};
  int64_t input = 0;
  double predicted_output =
      0;  // what the engine's length predictor says (EngineConfig::queue_order)
  int32_t preemptions = 0;
  bool swapped = false;  // preempted with its KV on the host
  int instance = 0;
  int rank = 0;
  int front = 0;               // the instance the client sent it to (its concurrency slot there)
  int64_t admitted_order = 0;  // preemption picks the most recently admitted
  int64_t cohort_mark = 0;
  int64_t cohort_index = 0;      // position in the cohort's member list
  std::vector<uint64_t> prefix;  // prompt prefix-block ids (Mooncake hash_ids)

  bool prefilling() const { return kv_len < prefill_target; }
};
static_assert(offsetof(Sequence, request_id) == 64, "a decode step's fields fill one cache line");

// The work a run has left on the sequences it holds (Simulator::Remaining): prompt tokens to
// compute (a preempted sequence's again), tokens to generate and the contexts they are generated
// at, each sequence counted from where it stands; and what the batches in flight compute of it
// (at most: every draft accepted).
struct RemainingWork {
  int64_t requests = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double context_tokens = 0;  // summed over the output tokens
  int64_t in_flight_prompt = 0, in_flight_output = 0;

  // Adds `s` as it stands `tokens` generated past its own counters (a cohort member's).
  void Add(const Sequence& s, int64_t tokens) {
    const int64_t kv = s.kv_len + tokens;
    const int64_t left = s.output - s.generated - tokens;
    ++requests;
    prompt_tokens += std::max<int64_t>(0, s.prefill_target - kv);
    if (left <= 0) return;
    output_tokens += left;
    const auto from = static_cast<double>(std::max(kv, s.prefill_target));
    context_tokens += static_cast<double>(left) * (from + 0.5 * static_cast<double>(left - 1));
  }
};

}  // namespace fathom::sim
