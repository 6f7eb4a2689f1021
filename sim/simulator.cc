#include "sim/simulator.h"

#include <algorithm>

#include "base/cancel.h"
#include "base/format.h"

namespace fathom::sim {
std::vector<std::string> SimulationResult::InvalidReasons() const {
  std::vector<std::string> why;
  if (stopped_early)
    why.push_back("stopped once its requests over a limit ruled out a p99 within it");
  if (limits && ttft_p99_ms > limits->ttft_ms) {
    why.push_back(StrFormat("p99 TTFT %s ms over the %s ms limit (%lld requests over)",
                            FormatCount(ttft_p99_ms).c_str(), FormatCount(limits->ttft_ms).c_str(),
                            static_cast<long long>(ttft_violations)));
  }
  if (limits && tpot_p99_ms > limits->tpot_ms) {
    why.push_back(StrFormat("p99 TPOT %.1f ms over the %s ms limit (%lld requests over)",
                            tpot_p99_ms, FormatCount(limits->tpot_ms).c_str(),
                            static_cast<long long>(tpot_violations)));
  }
  if (!min_duration_met) {
    why.push_back(StrFormat("run %s s below the %s s minimum", FormatCount(run_length_s).c_str(),
                            FormatCount(min_duration_s).c_str()));
  }
  if (why.empty() && !mlperf_valid) {
    why.push_back(
        "no p99 latency limits to judge it by (the workload has no MLPerf benchmark: give "
        "--ttft-ms and --tpot-ms)");
  }
  return why;
}

OrderedJson SimulationResult::ToJson() const {
  OrderedJson j;
  j["throughput_tokens_per_s"] = throughput_tokens_per_s;
  j["tokens_per_s_per_gpu"] = tokens_per_s_per_gpu;
  j["sustained_tokens_per_s"] = sustained_tokens_per_s;
  j["requests_per_s"] = requests_per_s;
  j["completed_requests"] = completed_requests;
  j["input_tokens"] = input_tokens;
  j["output_tokens"] = output_tokens;
  j["duration_s"] = duration_s;
  j["drain_end_s"] = drain_end_s;
  j["ttft_p50_ms"] = ttft_p50_ms;
  j["ttft_p99_ms"] = ttft_p99_ms;
  j["ttft_mean_ms"] = ttft_mean_ms;
  j["tpot_p50_ms"] = tpot_p50_ms;
  j["tpot_p99_ms"] = tpot_p99_ms;
  j["tpot_mean_ms"] = tpot_mean_ms;
  j["e2e_p50_ms"] = e2e_p50_ms;
  j["e2e_p99_ms"] = e2e_p99_ms;
  j["e2e_mean_ms"] = e2e_mean_ms;
  if (limits) {
    j["ttft_limit_ms"] = limits->ttft_ms;
    j["tpot_limit_ms"] = limits->tpot_ms;
  }
  j["latency_limits_met"] = latency_limits_met;
  j["min_duration_met"] = min_duration_met;
  j["mlperf_valid"] = mlperf_valid;
  if (stopped_early) j["stopped_early"] = true;
  j["invalid_reasons"] = InvalidReasons();
  if (limits) {
    j["ttft_violations"] = ttft_violations;
    j["tpot_violations"] = tpot_violations;
  }
  if (last_arrival_s > 0) {
    j["last_arrival_s"] = last_arrival_s;
    j["waiting_at_last_arrival"] = waiting_at_last_arrival;
    j["overloaded"] = overloaded;
  }
  j["preemptions"] = preemptions;
  if (front_max_tokens_per_s > 0) {
    j["serving_front"] = {{"busy_share", front_busy_share},
                          {"max_tokens_per_s_per_instance", front_max_tokens_per_s}};
  }
  j["kv_peak_utilization"] = kv_peak_utilization;
  j["prefix_hit_rate"] = prefix_hit_rate;
  j["iterations"] = iterations;
  j["mean_in_system"] = mean_in_system;
  j["peak_in_system"] = peak_in_flight;
  j["tokens"] = {{"prefilled", counters.prefill_tokens},
                 {"prefix_cached", counters.cached_tokens},
                 {"recomputed", counters.recomputed_tokens},
                 {"decode_steps", counters.decode_tokens},
                 {"generated", counters.generated_tokens}};
  if (!switches.empty()) {
    OrderedJson list = OrderedJson::array();
    for (const SwitchRecord& r : switches) {
      list.push_back({{"triggered_s", r.triggered_s},
                      {"stopped_s", r.stopped_s},
                      {"resumed_s", r.resumed_s},
                      {"moved", r.moved},
                      {"running", r.running},
                      {"kv_bytes", r.kv_bytes},
                      {"migrate_s", r.migrate_s}});
    }
    j["switches"] = std::move(list);
  }
  return j;
}

namespace {

// The sequence slots a thread's last simulation grew, kept for its next: a tuner's runs would
// otherwise each touch megabytes of fresh pages (faulted in one at a time, dearest in a VM) and
// move them as they grow. At most kKeptSlots are kept (a sweep's threads each keep theirs).
constexpr size_t kKeptSlots = size_t{1} << 17;  // 24 MB
std::vector<Sequence>& SpareSlots() {
  static thread_local std::vector<Sequence> spare;
  return spare;
}

}  // namespace

Simulator::Simulator(SimulationSpec spec, std::unique_ptr<RequestSource> source)
    : spec_(std::move(spec)),
      source_(std::move(source)),
      rng_(spec_.scenario.seed ^ 0x5eedf00dULL),
      slots_(std::move(SpareSlots())) {  // empty: kept cleared
  // Room for an Offline query in one allocation, within what a thread keeps at least twice what it
  // kept (a tuner's runs lengthen one after another).
  const size_t at_once = source_ ? static_cast<size_t>(source_->AtOnce()) : 0;
  if (at_once > slots_.capacity())
    slots_.reserve(std::max(at_once, std::min(2 * slots_.capacity(), kKeptSlots)));
  const bool disagg = spec_.decode_pool.has_value();
  AddEngines(spec_.pool, spec_.engine, disagg ? EngineRole::kPrefill : EngineRole::kAggregated,
             &main_engines_);
  if (disagg)
    AddEngines(*spec_.decode_pool, spec_.decode_engine, EngineRole::kDecode, &decode_engines_);
  phase_gpus_ = spec_.total_gpus;
  predict_ = OrdersByPredictedOutput(spec_.engine.queue_order);
  closed_loop_ = spec_.scenario.scenario == Scenario::kClosedLoop;
  const ScenarioConfig& sc = spec_.scenario;
  limits_ = MlperfLimits(spec_.benchmark, sc.scenario);
  if (sc.ttft_limit_ms || sc.tpot_limit_ms) {
    LatencyLimits l = limits_.value_or(LatencyLimits{1e300, 1e300});
    if (sc.ttft_limit_ms) l.ttft_ms = *sc.ttft_limit_ms;
    if (sc.tpot_limit_ms) l.tpot_ms = *sc.tpot_limit_ms;
    limits_ = l;
  }
}

Simulator::~Simulator() {
  slots_.clear();
  std::vector<Sequence>& spare = SpareSlots();
  if (slots_.capacity() <= kKeptSlots && slots_.capacity() > spare.capacity())
    spare = std::move(slots_);
}

void Simulator::AddEngines(const PoolSpec& pool, const EngineConfig& config, EngineRole role,
                           std::vector<int>* ids) {
  for (int i = 0; i < pool.instances; ++i) {
    const int id = static_cast<int>(engines_.size());
    engines_.push_back(std::make_unique<Engine>(id, role, pool, config, &slots_, this, &rng_));
    ids->push_back(id);
    // LoadGen's Offline scenario takes each sample whole: nothing is streamed.
    const bool streamed = spec_.scenario.scenario != Scenario::kOffline;
    responses_.emplace_back(pool.time->ResponseSeconds(),
                            streamed ? pool.StreamInterval(config) : 0);
    if (responses_.back().enabled()) front_busy_at_last_issue_.resize(responses_.size(), 0.0);
    last_stage_.push_back(pool.time->num_stages() - 1);
    kick_pending_.push_back(false);
    in_flight_.push_back(0);
    link_free_.push_back(SimTime(0));
    retired_.push_back(false);
  }
}

int64_t Simulator::NewSlot() {
  if (!free_slots_.empty()) {
    const int64_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  slots_.emplace_back();
  return static_cast<int64_t>(slots_.size()) - 1;
}

void Simulator::AdvanceLittle(SimTime now) {
  little_area_ += static_cast<double>(in_system_) * ToSeconds(now - little_last_);
  little_last_ = now;
}

std::pair<int, int> Simulator::Route(int64_t slot, const std::vector<int>& engines,
                                     RouterKind policy) {
  int best_e = engines[0], best_r = 0;
  if (policy == RouterKind::kLeastOutstanding) {
    // The loop below's choice, its keys compared as the integers they are (a disaggregated
    // deployment routes every prefilled request over all its decode ranks).
    int64_t fewest = INT64_MAX;
    for (int e : engines) {
      const Engine& engine = *engines_[e];
      for (int r = 0; r < engine.num_ranks(); ++r) {
        const int64_t n = engine.Outstanding(r);
        if (n < fewest) {
          fewest = n;
          best_e = e;
          best_r = r;
        }
      }
    }
    return {best_e, best_r};
  }
  const Sequence& s = slots_[slot];
  double best_key = 0;
  bool first = true;
  int64_t total = 0;
  for (int e : engines) total += engines_[e]->num_ranks();
  if (policy == RouterKind::kRoundRobin) {
    int64_t k = round_robin_++ % total;
    for (int e : engines) {
      if (k < engines_[e]->num_ranks()) return {e, static_cast<int>(k)};
      k -= engines_[e]->num_ranks();
    }
  }
  for (int e : engines) {
    const Engine& engine = *engines_[e];
    for (int r = 0; r < engine.num_ranks(); ++r) {
      const double outstanding = static_cast<double>(engine.Outstanding(r));
      double key = outstanding;
      if (policy == RouterKind::kLeastKv) key = engine.KvUtilization(r) * 1e9 + outstanding;
      if (policy == RouterKind::kPrefixAware)
        key = -static_cast<double>(engine.PrefixHits(r, s.prefix)) * 1e9 + outstanding;
      if (first || key < best_key) {
        best_key = key;
        best_e = e;
        best_r = r;
        first = false;
      }
    }
  }
  return {best_e, best_r};
}

void Simulator::Kick(int engine) {
  if (kick_pending_[engine]) return;
  kick_pending_[engine] = true;
  queue_.Push(queue_.now(), KickEvent{engine});
}

void Simulator::StartIfIdle(int engine) {
  if (retired_[engine] || stopping_ || restarting_) return;
  SimTime stage_free, done;
  int64_t batch_id = 0;
  const SimTime horizon = Horizon(engine);
  if (engines_[engine]->TryStart(queue_.now(), horizon, &stage_free, &done, &batch_id)) {
    queue_.Push(done, BatchDoneEvent{engine, batch_id});
    queue_.Push(stage_free, StageFreeEvent{engine});
  }
}

// A decode instance (disaggregated) sees a change from outside only when a KV transfer reaches it,
// and a transfer starts only when a prefill instance finishes a batch: with open-loop arrivals
// (none follows a completion) and no switch, its horizon is the first KV arrival due, or the
// earliest a prefill batch can finish plus the link's latency. Other engines' horizon is the next
// arrival of any kind.
SimTime Simulator::Horizon(int engine) const {
  const SimTime next = pending_times_.empty() ? SimTime::max() : *pending_times_.begin();
  if (engines_[engine]->role() != EngineRole::kDecode || closed_loop_ ||
      spec_.engine.max_concurrency > 0 || !switches_.empty())
    return next;
  SimTime prefill = SimTime::max();
  for (int e : main_engines_)
    prefill = std::min(prefill, engines_[e]->EarliestFinish(queue_.now(), next));
  if (prefill != SimTime::max()) prefill += FromSeconds(spec_.disagg.kv_link_latency_s);
  return std::min(prefill, kv_arrivals_.empty() ? SimTime::max() : *kv_arrivals_.begin());
}

Result<bool> Simulator::ScheduleNext(std::optional<SimTime> issue) {
  traces::Request r;
  SimTime source_time;
  FATHOM_ASSIGN_OR_RETURN(bool more, source_->Next(&r, &source_time));
  if (!more) return false;
  const SimTime t = issue.value_or(source_time);
  if (t < queue_.now()) {
    return Status::InvalidArgument("request " + std::to_string(r.id) + ": arrival at " +
                                   std::to_string(ToSeconds(t)) +
                                   " s is earlier than the previous one");
  }
  const int64_t key = next_arrival_key_++;
  pending_arrivals_.emplace(key, std::move(r));
  queue_.Push(t, ArrivalEvent{key});
  pending_times_.insert(t);
  return true;
}

void Simulator::Issue(const traces::Request& r) {
  const SimTime now = queue_.now();
  const int64_t slot = NewSlot();
  Sequence& s = slots_[slot];
  s = Sequence{};
  s.request_id = r.id;
  s.issue_index = score_.issued();
  s.scheduled = now;
  s.input = r.input_tokens;
  s.output = r.output_tokens;
  if (predict_) s.predicted_output = PredictedOutput(r);
  s.prefill_target = r.input_tokens;
  s.prefix = r.prefix_blocks;
  AdvanceLittle(now);
  ++in_system_;
  score_.Issued(ToSeconds(now));
  peak_in_system_ = std::max(peak_in_system_, in_system_);
  waiting_at_last_issue_ = ++awaiting_first_token_;
  for (size_t i = 0; i < front_busy_at_last_issue_.size(); ++i)
    front_busy_at_last_issue_[i] = responses_[i].busy_s();
  if (Watching())
    ttft_deadlines_.push_back(
        {now + FromSeconds(limits_->ttft_ms * 1e-3), s.issue_index, slot, false});
  if (!TryDispatch(slot, "arrival")) {
    held_.push_back(slot);
    if (event_log_) {
      event_log_->Printf("%.9f arrival request=%lld input=%lld output=%lld held\n", ToSeconds(now),
                         static_cast<long long>(r.id), static_cast<long long>(r.input_tokens),
                         static_cast<long long>(r.output_tokens));
    }
  }
  CheckSwitchTrigger(false);
}

bool Simulator::TryDispatch(int64_t slot, const char* event) {
  if (stopping_ || restarting_) return false;  // held until the new engines are up
  const int64_t limit = spec_.engine.max_concurrency;
  const std::vector<int>* engines = &main_engines_;
  if (limit > 0) {
    open_engines_.clear();
    for (int e : main_engines_) {
      if (in_flight_[e] < limit) open_engines_.push_back(e);
    }
    if (open_engines_.empty()) return false;
    engines = &open_engines_;
  }
  const auto [engine, rank] = Route(slot, *engines, spec_.router);
  peak_instance_in_flight_ = std::max(peak_instance_in_flight_, ++in_flight_[engine]);
  slots_[slot].front = engine;
  engines_[engine]->Enqueue(rank, slot);
  if (event_log_) {
    const Sequence& s = slots_[slot];
    event_log_->Printf("%.9f %s request=%lld input=%lld output=%lld engine=%d rank=%d\n",
                       ToSeconds(queue_.now()), event, static_cast<long long>(s.request_id),
                       static_cast<long long>(s.input), static_cast<long long>(s.output), engine,
                       rank);
  }
  Kick(engine);
  return true;
}

void Simulator::Inject(const traces::Request& r) {
  started_ = true;  // live: the requests come from outside, not from the source
  Issue(r);
}

bool Simulator::Cancel(int64_t request_id) {
  for (Sequence& s : slots_) {
    if (s.request_id != request_id) continue;
    s.output = std::min(s.output, s.generated + 1);
    return true;
  }
  return false;
}

std::optional<SimTime> Simulator::NextEventTime() const {
  if (queue_.empty()) return std::nullopt;
  return queue_.next_time();
}

EngineCounters Simulator::Counters() const {
  EngineCounters sum;
  for (const auto& engine : engines_) {
    const EngineCounters& c = engine->counters();
    sum.iterations += c.iterations;
    sum.prefill_tokens += c.prefill_tokens;
    sum.cached_tokens += c.cached_tokens;
    sum.recomputed_tokens += c.recomputed_tokens;
    sum.decode_tokens += c.decode_tokens;
    sum.generated_tokens += c.generated_tokens;
    sum.preemptions += c.preemptions;
    sum.swapped_bytes += c.swapped_bytes;
    sum.busy += c.busy;
    sum.cost.Add(c.cost, 1);
  }
  return sum;
}

double Simulator::KvUtilization() const {
  double sum = 0;
  int ranks = 0;
  for (const auto& engine : engines_) {
    for (int r = 0; r < engine->num_ranks(); ++r, ++ranks) sum += engine->KvUtilization(r);
  }
  return ranks > 0 ? sum / ranks : 0.0;
}

void Simulator::OnTokens(int64_t slot, int64_t count, SimTime t) {
  if (on_tokens_) on_tokens_(slots_[slot].request_id, count, t);
}

void Simulator::CountViolation(int64_t* violations) {
  ++*violations;
  const int64_t stop = spec_.scenario.stop_after_violations;
  if (stop > 0 && (*violations >= stop || (spec_.scenario.stop_when_clearly_broken &&
                                           P99ClearlyBroken(*violations, score_.issued())))) {
    stopped_ = true;
  }
}

bool Simulator::Watching() const { return limits_ && spec_.scenario.stop_after_violations > 0; }

// A request still waiting for its first token past the TTFT limit, or still generating past
// first token + limit x (output - 1), breaks the limit whatever happens next: count it now.
void Simulator::CountCertainViolations(SimTime now) {
  for (;;) {
    Deadline d;
    const bool heap_due = !deadlines_.empty() && deadlines_.top().at < now;
    if (!ttft_deadlines_.empty() && ttft_deadlines_.front().at < now &&
        (!heap_due || ttft_deadlines_.front().at <= deadlines_.top().at)) {
      d = ttft_deadlines_.front();
      ttft_deadlines_.pop_front();
    } else if (heap_due) {
      d = deadlines_.top();
      deadlines_.pop();
    } else {
      break;
    }
    Sequence& s = slots_[d.slot];
    if (s.issue_index != d.issue_index || s.generated >= s.output)
      continue;  // slot reused, or done
    if (!d.tpot && !s.has_first_token) {
      s.ttft_violation_counted = true;
      CountViolation(&ttft_violations_);
    } else if (d.tpot) {
      s.tpot_violation_counted = true;
      CountViolation(&tpot_violations_);
    }
  }
}

void Simulator::OnFirstToken(int64_t slot, SimTime t) {
  const SimTime seen = responses_[slots_[slot].instance].Delivered(t);
  if (seen > t) {
    queue_.Push(seen, ResponseEvent{slot, false});
    return;
  }
  FirstTokenSeen(slot, t);
}

void Simulator::FirstTokenSeen(int64_t slot, SimTime t) {
  Sequence& s = slots_[slot];
  s.first_token = t;
  --awaiting_first_token_;
  if (limits_ && ToMillis(t - s.scheduled) > limits_->ttft_ms && !s.ttft_violation_counted) {
    CountViolation(&ttft_violations_);
  }
  if (Watching() && s.output > 1) {
    deadlines_.push({t + FromSeconds(limits_->tpot_ms * 1e-3 * static_cast<double>(s.output - 1)),
                     s.issue_index, slot, true});
  }
  if (on_first_token_) {
    on_first_token_(
        RequestRecord{s.request_id, s.input, s.output, ToSeconds(s.scheduled), ToSeconds(t), 0});
  }
  if (event_log_) {
    event_log_->Printf("%.9f first_token request=%lld\n", ToSeconds(t),
                       static_cast<long long>(slots_[slot].request_id));
  }
}

void Simulator::OnComplete(int64_t slot, SimTime t) {
  const SimTime seen = responses_[slots_[slot].instance].Delivered(t);
  if (seen > t) {
    // A closed-loop client's next request follows, or one the client held back: engines plan
    // around it.
    const bool planned = closed_loop_ || !held_.empty();
    queue_.Push(seen, ResponseEvent{slot, true, planned});
    if (planned) pending_times_.insert(seen);
    return;
  }
  CompletionSeen(slot, t);
}

void Simulator::CompletionSeen(int64_t slot, SimTime t) {
  Sequence& s = slots_[slot];
  const double ttft = ToMillis(s.first_token - s.scheduled);
  const double e2e = ToMillis(t - s.scheduled);
  score_.Completed(s.issue_index, ttft, e2e, ToSeconds(t), s.input, s.output);
  if (limits_ && s.output > 1 && !s.tpot_violation_counted &&
      (e2e - ttft) / static_cast<double>(s.output - 1) > limits_->tpot_ms) {
    CountViolation(&tpot_violations_);
  }
  AdvanceLittle(t);
  --in_system_;
  --in_flight_[s.front];
  if (on_complete_) {
    on_complete_(RequestRecord{s.request_id, s.input, s.output, ToSeconds(s.scheduled),
                               ToSeconds(s.first_token), ToSeconds(t)});
  }
  if (requests_csv_) {
    requests_csv_->Printf("%lld,%.9f,%.9f,%.9f,%lld,%lld,%d\n",
                          static_cast<long long>(s.request_id), ToSeconds(s.scheduled),
                          ToSeconds(s.first_token), ToSeconds(t), static_cast<long long>(s.input),
                          static_cast<long long>(s.output), s.preemptions);
  }
  if (event_log_) {
    event_log_->Printf("%.9f complete request=%lld generated=%lld preemptions=%d\n", ToSeconds(t),
                       static_cast<long long>(s.request_id), static_cast<long long>(s.generated),
                       s.preemptions);
  }
  s.prefix.clear();
  free_slots_.push_back(slot);
  CheckSwitchTrigger(true);
  if (!held_.empty()) queue_.Push(t, ReleaseEvent{});  // not from inside an engine's Finish
  if (closed_loop_) {
    Result<bool> more = ScheduleNext(t + FromSeconds(spec_.scenario.think_time_s));
    FATHOM_CHECK(more.ok());  // closed-loop sources are in-memory data sets
  }
}

void Simulator::OnPrefillDone(int64_t slot, SimTime t) {
  Sequence& s = slots_[slot];
  const auto [engine, rank] = Route(slot, decode_engines_, RouterKind::kLeastOutstanding);
  (void)rank;
  const double bytes = static_cast<double>(s.kv_len) * spec_.pool.kv_bytes_per_token;
  const SimTime start = std::max(t, link_free_[engine]);
  const SimTime end = start + FromSeconds(spec_.disagg.kv_link_latency_s +
                                          bytes / spec_.disagg.kv_link_bytes_per_s);
  link_free_[engine] = end;
  if (event_log_) {
    event_log_->Printf("%.9f kv_transfer request=%lld engine=%d bytes=%.0f arrives=%.9f\n",
                       ToSeconds(t), static_cast<long long>(s.request_id), engine, bytes,
                       ToSeconds(end));
  }
  queue_.Push(end, KvArrivedEvent{slot, engine});
  pending_times_.insert(end);
  kv_arrivals_.insert(end);
}

void Simulator::OnIteration(int instance, int stage, SimTime start, SimTime end, int64_t steps,
                            int64_t tokens, int64_t sequences) {
  if (stage == last_stage_[instance] && responses_[instance].enabled())
    responses_[instance].Batch(start, end, steps, sequences);
  if (timeline_) {
    timeline_->Printf(
        "%s{\"name\":\"%s\",\"cat\":\"iteration\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
        "\"dur\":%.3f,\"args\":{\"steps\":%lld,\"tokens\":%lld,\"sequences\":%lld}}",
        first_timeline_event_ ? "" : ",\n", steps > 1 ? "decode steps" : "batch", instance, stage,
        start.count() / 1e3, (end - start).count() / 1e3, static_cast<long long>(steps),
        static_cast<long long>(tokens), static_cast<long long>(sequences));
    first_timeline_event_ = false;
  }
  if (event_log_) {
    event_log_->Printf(
        "%.9f iteration engine=%d stage=%d steps=%lld tokens=%lld sequences=%lld end=%.9f\n",
        ToSeconds(start), instance, stage, static_cast<long long>(steps),
        static_cast<long long>(tokens), static_cast<long long>(sequences), ToSeconds(end));
  }
}

RemainingWork Simulator::Remaining() const {
  RemainingWork w;
  for (const auto& engine : engines_) engine->AddRemainingWork(&w);
  for (int64_t slot : held_) w.Add(slots_[slot], 0);
  return w;
}

Status Simulator::Advance(SimTime until) {
  if (!started_) {
    started_ = true;
    ArmSwitch();
    if (spec_.scenario.scenario == Scenario::kOffline &&
        spec_.engine.queue_order != QueueOrder::kFifo)
      FATHOM_RETURN_IF_ERROR(SortOfflineQuery());
    if (closed_loop_) {
      for (int c = 0; c < spec_.scenario.clients; ++c) {
        FATHOM_ASSIGN_OR_RETURN(bool more, ScheduleNext(SimTime(0)));
        if (!more) break;
      }
    } else {
      FATHOM_ASSIGN_OR_RETURN(bool more, ScheduleNext(std::nullopt));
      (void)more;
    }
  }
  while (!queue_.empty() && !stopped_ && queue_.next_time() <= until) {
    // A work pool that no longer wants this run's result stops it (base/cancel.h).
    if ((++events_ & 1023) == 0 && CancelRequested())
      return Status::Unavailable("simulation cancelled: its result is no longer wanted");
    const Event e = queue_.Pop();
    if (Watching()) {
      CountCertainViolations(e.time);
      if (stopped_) break;
    }
    const EventPayload& p = e.payload;
    if (const auto* done = std::get_if<BatchDoneEvent>(&p)) {
      const std::optional<SimTime> later = engines_[done->engine]->Finish(done->batch_id, e.time);
      if (later) {
        queue_.Push(*later, *done);  // it stepped on beside a later microbatch (Engine::JointRun)
      } else {
        Kick(done->engine);  // with pipelining, the freed sequences may run again
        if (stopping_) EvacuateIfStopped();
      }
    } else if (const auto* sw = std::get_if<SwitchEvent>(&p)) {
      if (sw->resume) {
        ResumeAfterSwitch();
      } else {
        if (switches_.front().when.kind == SwitchTrigger::Kind::kAfter)
          pending_times_.erase(pending_times_.find(e.time));
        BeginSwitch();
      }
    } else if (const auto* free = std::get_if<StageFreeEvent>(&p)) {
      engines_[free->engine]->StageFreed();
      StartIfIdle(free->engine);
    } else if (const auto* kick = std::get_if<KickEvent>(&p)) {
      kick_pending_[kick->engine] = false;
      StartIfIdle(kick->engine);
    } else if (const auto* seen = std::get_if<ResponseEvent>(&p)) {
      if (!seen->complete) {
        FirstTokenSeen(seen->slot, e.time);
      } else {
        if (seen->planned) pending_times_.erase(pending_times_.find(e.time));
        CompletionSeen(seen->slot, e.time);
      }
    } else if (std::holds_alternative<ReleaseEvent>(p)) {
      // Two completions at once may both release the one request held.
      if (!held_.empty() && TryDispatch(held_.front(), "dispatch")) held_.pop_front();
    } else if (const auto* kv = std::get_if<KvArrivedEvent>(&p)) {
      pending_times_.erase(pending_times_.find(e.time));
      kv_arrivals_.erase(kv_arrivals_.find(e.time));
      Sequence& s = slots_[kv->slot];
      s.kv_len = s.prefill_target;
      Engine& engine = *engines_[kv->engine];
      int best = 0;
      for (int r = 1; r < engine.num_ranks(); ++r) {
        if (engine.Outstanding(r) < engine.Outstanding(best)) best = r;
      }
      engine.Enqueue(best, kv->slot);
      Kick(kv->engine);
    } else {
      pending_times_.erase(pending_times_.find(e.time));
      auto it = pending_arrivals_.find(std::get<ArrivalEvent>(p).request_key);
      const traces::Request r = std::move(it->second);
      pending_arrivals_.erase(it);
      Issue(r);
      if (!closed_loop_) {
        FATHOM_ASSIGN_OR_RETURN(bool more, ScheduleNext(std::nullopt));
        (void)more;
      }
    }
  }
  if (!stopped_ && until != SimTime::max()) queue_.AdvanceClock(until);
  return Status::Ok();
}

Status Simulator::SetBatchLimits(int64_t max_batch, int64_t max_num_tokens) {
  if (spec_.decode_pool)
    return Status::InvalidArgument("batch limits change only on aggregated deployments");
  if (max_batch < 1 || max_num_tokens < 1) {
    return Status::InvalidArgument("batch limits " + std::to_string(max_batch) + " sequences, " +
                                   std::to_string(max_num_tokens) + " tokens: each must be >= 1");
  }
  for (int e : main_engines_) {
    engines_[e]->SetBatchLimits(max_batch, max_num_tokens);
    Kick(e);  // a raised limit may admit waiting requests now
  }
  return Status::Ok();
}

double Simulator::PredictedOutput(const traces::Request& r) const {
  // Fixed per request and seed: a predictor is a function of the prompt.
  Rng draw(spec_.scenario.seed * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(r.id));
  return static_cast<double>(r.output_tokens) *
         std::exp(spec_.engine.prediction_sigma * draw.Normal());
}

Status Simulator::SortOfflineQuery() {
  std::vector<std::pair<traces::Request, SimTime>> query;
  traces::Request r;
  SimTime t;
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool more, source_->Next(&r, &t));
    if (!more) break;
    query.emplace_back(std::move(r), t);
  }
  std::vector<double> key(query.size());
  const bool by_output = OrdersByPredictedOutput(spec_.engine.queue_order);
  for (size_t i = 0; i < query.size(); ++i) {
    key[i] = by_output ? PredictedOutput(query[i].first)
                       : static_cast<double>(query[i].first.input_tokens);
  }
  std::vector<size_t> order(query.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const bool longest = TakesLongestFirst(spec_.engine.queue_order);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return longest ? key[a] > key[b] : key[a] < key[b]; });
  std::vector<std::pair<traces::Request, SimTime>> sorted;
  sorted.reserve(query.size());
  for (size_t i : order) sorted.push_back(std::move(query[i]));
  source_ = ListSource(std::move(sorted));
  return Status::Ok();
}

Status Simulator::ScheduleSwitch(ConfigSwitch sw) {
  if (spec_.decode_pool)
    return Status::InvalidArgument("configuration switches need an aggregated deployment");
  if (!sw.in_place && (sw.pool.time == nullptr || sw.pool.instances < 1))
    return Status::InvalidArgument("a configuration switch needs the new instances' pool");
  if (!(sw.restart_s >= 0) || !(sw.when.value >= 0))
    return Status::InvalidArgument("a configuration switch's times and counts must be >= 0");
  if (sw.kv == KvMove::kMigrate && !sw.in_place && !(sw.migrate_bytes_per_s > 0))
    return Status::InvalidArgument("a switch that migrates KV needs the bandwidth it moves at");
  predict_ = predict_ || OrdersByPredictedOutput(sw.engine.queue_order);
  switches_.push_back(std::move(sw));
  if (switches_.size() == 1 && started_) ArmSwitch();
  return Status::Ok();
}

void Simulator::ArmSwitch() {
  switch_due_ = false;
  if (switches_.empty()) return;
  const SwitchTrigger& when = switches_.front().when;
  if (when.kind == SwitchTrigger::Kind::kAfter) {
    const SimTime t = std::max(queue_.now(), FromSeconds(when.value));
    queue_.Push(t, SwitchEvent{false});
    pending_times_.insert(t);  // engines fast-forward no decode steps past it
    switch_due_ = true;
  }
}

void Simulator::CheckSwitchTrigger(bool completion) {
  if (switches_.empty() || switch_due_ || stopping_ || restarting_) return;
  const SwitchTrigger& when = switches_.front().when;
  const double n = static_cast<double>(in_system_);
  const bool due = completion
                       ? when.kind == SwitchTrigger::Kind::kInSystemAtMost && n <= when.value
                       : when.kind == SwitchTrigger::Kind::kInSystemAtLeast && n >= when.value;
  if (!due) return;
  // Not from inside an engine's Finish: the switch starts once the current event is done.
  queue_.Push(queue_.now(), SwitchEvent{false});
  switch_due_ = true;
}

void Simulator::BeginSwitch() {
  const ConfigSwitch& sw = switches_.front();
  SwitchRecord record;
  record.triggered_s = ToSeconds(queue_.now());
  record.generated_before = Counters().generated_tokens;
  if (event_log_) {
    event_log_->Printf("%.9f switch in_system=%lld in_place=%d\n", record.triggered_s,
                       static_cast<long long>(in_system_), sw.in_place ? 1 : 0);
  }
  if (sw.in_place) {
    record.stopped_s = record.resumed_s = record.triggered_s;
    switch_records_.push_back(record);
    for (int e : main_engines_) {
      engines_[e]->SetBatchLimits(sw.engine.max_batch, sw.engine.max_num_tokens);
      Kick(e);
    }
    spec_.engine.max_batch = sw.engine.max_batch;
    spec_.engine.max_num_tokens = sw.engine.max_num_tokens;
    if (cycle_switches_) switches_.push_back(sw);
    switches_.pop_front();
    ArmSwitch();
    return;
  }
  switch_records_.push_back(record);
  if (sw.scale_only && sw.pool.instances <= static_cast<int>(main_engines_.size())) {
    ScaleTo();  // fewer instances: at once
    return;
  }
  if (sw.kv == KvMove::kDrain) {  // the old engines serve on while the new ones start
    queue_.Push(queue_.now() + FromSeconds(sw.restart_s), SwitchEvent{true});
    return;
  }
  stopping_ = true;
  EvacuateIfStopped();
}

void Simulator::EvacuateIfStopped() {
  for (int e : main_engines_) {
    if (!engines_[e]->Idle()) return;
  }
  const ConfigSwitch& sw = switches_.front();
  SwitchRecord& record = switch_records_.back();
  record.stopped_s = ToSeconds(queue_.now());
  // Every GPU sends its share of its ranks' KV at once: the busiest rank sets the time.
  const double gpus_per_rank =
      static_cast<double>(phase_gpus_) / (spec_.pool.instances * spec_.pool.ranks);
  double busiest_rank_bytes = 0;
  for (int e : main_engines_) {
    std::vector<double> rank_bytes(engines_[e]->num_ranks(), 0.0);
    for (int64_t slot : engines_[e]->Evacuate()) {
      Sequence& s = slots_[slot];
      --in_flight_[s.front];
      if (s.kv_len > 0) ++record.running;
      if (sw.kv == KvMove::kRecompute) {
        s.kv_len = 0;
        s.prefill_target = s.input + s.generated;
      } else {
        rank_bytes[s.rank] += static_cast<double>(s.kv_len) * spec_.pool.kv_bytes_per_token;
      }
      evacuated_.push_back(slot);
    }
    for (double b : rank_bytes) {
      busiest_rank_bytes = std::max(busiest_rank_bytes, b);
      record.kv_bytes += b * gpus_per_rank;
    }
    retired_[e] = true;
  }
  record.moved = static_cast<int64_t>(evacuated_.size());
  record.migrate_s = sw.kv == KvMove::kMigrate ? busiest_rank_bytes / sw.migrate_bytes_per_s : 0;
  main_engines_.clear();
  stopping_ = false;
  restarting_ = true;
  queue_.Push(queue_.now() + FromSeconds(sw.restart_s + record.migrate_s), SwitchEvent{true});
}

ConfigSwitch Simulator::TakeSwitch() {
  ConfigSwitch sw = std::move(switches_.front());
  switches_.pop_front();
  if (cycle_switches_) switches_.push_back(sw);
  return sw;
}

void Simulator::ScaleTo() {
  const ConfigSwitch sw = TakeSwitch();
  SwitchRecord& record = switch_records_.back();
  record.stopped_s = record.resumed_s = ToSeconds(queue_.now());
  const int have = static_cast<int>(main_engines_.size());
  if (sw.pool.instances > have) {
    PoolSpec added = sw.pool;
    added.instances = sw.pool.instances - have;
    AddEngines(added, sw.engine, EngineRole::kAggregated, &main_engines_);
  } else {
    const std::vector<int> leaving(main_engines_.begin() + sw.pool.instances, main_engines_.end());
    main_engines_.resize(sw.pool.instances);
    TakeUnstartedFrom(leaving, &record);
  }
  spec_.pool.instances = sw.pool.instances;
  phase_gpus_ = sw.total_gpus;
  spec_.total_gpus = std::max(spec_.total_gpus, sw.total_gpus);
  DispatchMoved();
  ArmSwitch();
}

void Simulator::TakeUnstartedFrom(const std::vector<int>& engines, SwitchRecord* record) {
  for (int e : engines) {
    for (int64_t slot : engines_[e]->TakeUnstarted()) {
      --in_flight_[slots_[slot].front];
      evacuated_.push_back(slot);
    }
    for (int r = 0; r < engines_[e]->num_ranks(); ++r)
      record->running += engines_[e]->Outstanding(r);
  }
  std::stable_sort(evacuated_.begin(), evacuated_.end(), [&](int64_t a, int64_t b) {
    return slots_[a].issue_index < slots_[b].issue_index;
  });
  record->moved = static_cast<int64_t>(evacuated_.size());
}

void Simulator::DispatchMoved() {
  // The evacuated sequences first, oldest first, then the arrivals held meanwhile.
  std::vector<int64_t> order = std::move(evacuated_);
  order.insert(order.end(), held_.begin(), held_.end());
  evacuated_.clear();
  held_.clear();
  for (int64_t slot : order) {
    if (!held_.empty() || !TryDispatch(slot, "resume")) held_.push_back(slot);
  }
}

void Simulator::ResumeAfterSwitch() {
  if (switches_.front().scale_only) {
    ScaleTo();  // more instances: the new ones are up
    return;
  }
  const ConfigSwitch sw = TakeSwitch();
  SwitchRecord& record = switch_records_.back();
  if (sw.kv == KvMove::kDrain) {
    // The old engines take no new request and hand over those that have not started.
    record.stopped_s = ToSeconds(queue_.now());
    TakeUnstartedFrom(main_engines_, &record);
    main_engines_.clear();
  }
  spec_.pool = sw.pool;
  spec_.engine = sw.engine;
  phase_gpus_ = sw.total_gpus;
  spec_.total_gpus = std::max(spec_.total_gpus, sw.total_gpus);  // what the run is scored on
  AddEngines(spec_.pool, spec_.engine, EngineRole::kAggregated, &main_engines_);
  restarting_ = false;
  record.resumed_s = ToSeconds(queue_.now());
  DispatchMoved();
  ArmSwitch();
}

Result<SimulationResult> Simulator::Run() {
  FATHOM_RETURN_IF_ERROR(Advance(SimTime::max()));

  SimulationResult res;
  const int64_t completed = score_.completed(), issued = score_.issued();
  if (completed != issued && !stopped_) {
    return Status::InvalidArgument(
        "the deployment could not serve every request (" + std::to_string(issued - completed) +
        " never completed): a request needs more KV cache than one attention rank has; lower the "
        "output cap or use more GPUs per rank");
  }
  score_.Fill(spec_.scenario, limits_, spec_.total_gpus, stopped_, &res);
  res.ttft_violations = ttft_violations_;
  res.tpot_violations = tpot_violations_;
  if (res.drain_end_s > 0) {
    res.mean_in_system = little_area_ / res.drain_end_s;
    res.arrival_rate_per_s = issued / res.drain_end_s;
  }
  res.peak_in_flight = peak_in_system_;
  res.switches = switch_records_;
  const Scenario scenario = spec_.scenario.scenario;
  if (scenario != Scenario::kOffline && scenario != Scenario::kClosedLoop) {
    res.last_arrival_s = score_.last_issue_s();
    res.waiting_at_last_arrival = waiting_at_last_issue_;
    const double minute_of_arrivals =
        res.last_arrival_s > 0 ? 60.0 * issued / res.last_arrival_s : 0;
    res.overloaded = res.waiting_at_last_arrival > std::max(1.0, minute_of_arrivals);
  }

  res.counters = Counters();
  int64_t lookups = 0, hits = 0;
  for (const auto& engine : engines_) {
    (engine->role() == EngineRole::kDecode ? res.decode_slack : res.slack).Add(engine->Slack());
    res.kv_peak_utilization = std::max(res.kv_peak_utilization, engine->PeakKvUtilization());
    lookups += engine->prefix_lookups();
    hits += engine->prefix_hits();
  }
  res.slack.peak_instance_in_flight = peak_instance_in_flight_;
  // The front's load while requests arrive (the drain after the last one would dilute it): the
  // work handed to it by then over that time.
  const double last_issue_s = score_.last_issue_s();
  for (size_t i = 0; i < front_busy_at_last_issue_.size(); ++i) {
    if (!responses_[i].enabled()) continue;
    res.front_max_tokens_per_s = responses_[i].max_tokens_per_s();
    if (last_issue_s > 0) {
      res.front_busy_share = std::max(res.front_busy_share,
                                      std::min(1.0, front_busy_at_last_issue_[i] / last_issue_s));
    }
  }
  res.preemptions = res.counters.preemptions;
  res.iterations = res.counters.iterations;
  res.prefix_hit_rate = lookups > 0 ? static_cast<double>(hits) / lookups : 0.0;
  return res;
}

}  // namespace fathom::sim
