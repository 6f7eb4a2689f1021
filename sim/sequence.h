// Per-request state while a request is inside the simulated cluster.
#pragma once

#include <cstdint>
#include <vector>

#include "base/sim_time.h"

namespace fathom::sim {

struct Sequence {
  int64_t request_id = 0;
  int64_t issue_index = 0;  // order of issue, from 0
  SimTime scheduled{0};     // LoadGen's scheduled issue time: latencies count from here
  SimTime first_token{0};
  bool has_first_token = false;
  int64_t input = 0;
  int64_t output = 0;
  double predicted_output =
      0;  // what the engine's length predictor says (EngineConfig::queue_order)
  // Tokens whose KV is stored, and the KV length at which the next token is sampled (input plus
  // tokens generated before the last admission). kv_len < prefill_target means prefilling.
  int64_t kv_len = 0;
  int64_t prefill_target = 0;
  int64_t generated = 0;
  int64_t kv_high = 0;        // longest KV ever held: prompt tokens below it were computed before
  int64_t owned_blocks = 0;   // KV blocks held outside the prefix cache
  int64_t pinned_prefix = 0;  // leading prefix-cache blocks pinned by this request
  int32_t preemptions = 0;
  bool swapped = false;    // preempted with its KV on the host
  bool in_flight = false;  // part of a batch still in the pipeline
  bool ttft_violation_counted = false, tpot_violation_counted = false;  // counted before the fact
  int instance = 0;
  int rank = 0;
  int front = 0;               // the instance the client sent it to (its concurrency slot there)
  int64_t admitted_order = 0;  // preemption picks the most recently admitted
  // In one of its rank's decode cohorts (>= 0): kv_len, generated and owned_blocks are as of
  // that cohort's step `cohort_mark` (Engine::Sync brings them up to date).
  int cohort = -1;
  int64_t cohort_mark = 0;
  int64_t cohort_index = 0;      // position in the cohort's member list
  std::vector<uint64_t> prefix;  // prompt prefix-block ids (Mooncake hash_ids)

  bool prefilling() const { return kv_len < prefill_target; }
};

}  // namespace fathom::sim
