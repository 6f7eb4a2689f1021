#include "models/cost_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "base/csv.h"
#include "base/files.h"
#include "models/stack.h"

namespace fathom::models {

std::array<double, CostParams::kNumFitted> CostParams::Fitted() const {
  return {gemm_efficiency,
          memory_efficiency,
          iteration_overhead_us,
          per_sequence_overhead_us,
          cpp_iteration_overhead_us,
          cpp_per_sequence_overhead_us,
          cpp_launch_us,
          eager_launch_us,
          fp4_gemm_efficiency,
          fp8_gemm_efficiency,
          kernel_floor_us,
          grouped_memory_efficiency};
}

void CostParams::SetFitted(const std::array<double, kNumFitted>& v) {
  gemm_efficiency = v[0];
  memory_efficiency = v[1];
  iteration_overhead_us = v[2];
  per_sequence_overhead_us = v[3];
  cpp_iteration_overhead_us = v[4];
  cpp_per_sequence_overhead_us = v[5];
  cpp_launch_us = v[6];
  eager_launch_us = v[7];
  fp4_gemm_efficiency = v[8];
  fp8_gemm_efficiency = v[9];
  kernel_floor_us = v[10];
  grouped_memory_efficiency = v[11];
}

Status CostParams::Validate() const {
  auto fraction = [](const char* name, double v) -> Status {
    if (v > 0 && v <= 1) return Status::Ok();
    return Status::InvalidArgument(std::string(name) + " = " + std::to_string(v) +
                                   ": must be in (0, 1]");
  };
  FATHOM_RETURN_IF_ERROR(fraction("gemm_efficiency", gemm_efficiency));
  FATHOM_RETURN_IF_ERROR(fraction("fp4_gemm_efficiency", fp4_gemm_efficiency));
  FATHOM_RETURN_IF_ERROR(fraction("fp8_gemm_efficiency", fp8_gemm_efficiency));
  FATHOM_RETURN_IF_ERROR(fraction("memory_efficiency", memory_efficiency));
  FATHOM_RETURN_IF_ERROR(fraction("grouped_memory_efficiency", grouped_memory_efficiency));
  if (fp8_grouped_memory_efficiency != 0) {
    FATHOM_RETURN_IF_ERROR(fraction("fp8_grouped_memory_efficiency (0: grouped_memory_efficiency)",
                                    fp8_grouped_memory_efficiency));
  }
  for (auto [name, v] :
       {std::pair{"dequant_grouped_memory_efficiency (0: as native kernels)",
                  dequant_grouped_memory_efficiency},
        std::pair{"dequant_gemm_efficiency (0: as native kernels)", dequant_gemm_efficiency}}) {
    if (v != 0) FATHOM_RETURN_IF_ERROR(fraction(name, v));
  }
  if ((dequant_grouped_memory_efficiency == 0) != (dequant_gemm_efficiency == 0)) {
    return Status::InvalidArgument(
        "dequant_grouped_memory_efficiency and dequant_gemm_efficiency: set both (the path of "
        "experts a GPU dequantises) or neither");
  }
  FATHOM_RETURN_IF_ERROR(fraction("attention_efficiency", attention_efficiency));
  FATHOM_RETURN_IF_ERROR(fraction("link_efficiency", link_efficiency));
  if (comm_overlap < 0 || comm_overlap > 1)
    return Status::InvalidArgument("comm_overlap must be in [0, 1]");
  for (auto [name, v] : {std::pair{"gemm_stream_share", gemm_stream_share},
                         {"kernel_floor_us", kernel_floor_us},
                         {"collective_latency_us", collective_latency_us},
                         {"collective_hop_latency_us", collective_hop_latency_us},
                         {"iteration_overhead_us", iteration_overhead_us},
                         {"per_sequence_overhead_us", per_sequence_overhead_us},
                         {"cpp_iteration_overhead_us", cpp_iteration_overhead_us},
                         {"cpp_per_sequence_overhead_us", cpp_per_sequence_overhead_us},
                         {"cpp_launch_us", cpp_launch_us},
                         {"moe_skew", moe_skew},
                         {"response_us", response_us},
                         {"eager_launch_us", eager_launch_us}}) {
    if (v < 0)
      return Status::InvalidArgument(std::string(name) + " = " + std::to_string(v) +
                                     ": must be >= 0");
  }
  if (stream_interval < 0) {
    return Status::InvalidArgument("stream_interval = " + std::to_string(stream_interval) +
                                   ": must be >= 0");
  }
  for (size_t i = 0; i < cuda_graph_batch_sizes.size(); ++i) {
    const int64_t b = cuda_graph_batch_sizes[i];
    if (b < 1 || (i > 0 && b <= cuda_graph_batch_sizes[i - 1])) {
      return Status::InvalidArgument("cuda_graph_batch_sizes: " + std::to_string(b) +
                                     ": must be positive and ascending");
    }
  }
  return Status::Ok();
}

// Every parameter with its name in a calibration file, for reading and writing it.
constexpr std::pair<const char*, double CostParams::*> kParamFields[] = {
    {"gemm_efficiency", &CostParams::gemm_efficiency},
    {"fp4_gemm_efficiency", &CostParams::fp4_gemm_efficiency},
    {"fp8_gemm_efficiency", &CostParams::fp8_gemm_efficiency},
    {"gemm_stream_share", &CostParams::gemm_stream_share},
    {"memory_efficiency", &CostParams::memory_efficiency},
    {"grouped_memory_efficiency", &CostParams::grouped_memory_efficiency},
    {"fp8_grouped_memory_efficiency", &CostParams::fp8_grouped_memory_efficiency},
    {"dequant_grouped_memory_efficiency", &CostParams::dequant_grouped_memory_efficiency},
    {"dequant_gemm_efficiency", &CostParams::dequant_gemm_efficiency},
    {"attention_efficiency", &CostParams::attention_efficiency},
    {"kernel_floor_us", &CostParams::kernel_floor_us},
    {"link_efficiency", &CostParams::link_efficiency},
    {"collective_latency_us", &CostParams::collective_latency_us},
    {"collective_hop_latency_us", &CostParams::collective_hop_latency_us},
    {"comm_overlap", &CostParams::comm_overlap},
    {"iteration_overhead_us", &CostParams::iteration_overhead_us},
    {"per_sequence_overhead_us", &CostParams::per_sequence_overhead_us},
    {"cpp_iteration_overhead_us", &CostParams::cpp_iteration_overhead_us},
    {"cpp_per_sequence_overhead_us", &CostParams::cpp_per_sequence_overhead_us},
    {"cpp_launch_us", &CostParams::cpp_launch_us},
    {"moe_skew", &CostParams::moe_skew},
    {"response_us", &CostParams::response_us},
    {"eager_launch_us", &CostParams::eager_launch_us},
};

Result<Calibration> LoadCalibration(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  return CalibrationFromJson(j, path);
}

double CostParams::*GemmEfficiencyField(const Hardware& hw, DType t) {
  // The fraction of the peak Hardware::PeakFlops runs `t` at.
  const double peak = hw.PeakFlops(t);
  if (hw.HasFp4Cores() && peak == hw.peak_fp4_flops) return &CostParams::fp4_gemm_efficiency;
  if (hw.peak_fp8_flops > 0 && peak == hw.peak_fp8_flops) return &CostParams::fp8_gemm_efficiency;
  return &CostParams::gemm_efficiency;
}

const char* CostParamName(double CostParams::*field) {
  for (const auto& [name, f] : kParamFields) {
    if (f == field) return name;
  }
  return "?";
}

namespace {

// A calibration's all_reduce_tables: {GPU: {ranks: [[bytes, microseconds], ...]}}.
Status ReadAllReduceTables(const Json& t, const std::string& where, AllReduceTables* out) {
  if (!t.is_object()) return Status::InvalidArgument(where + ": not an object");
  for (const auto& gpu : t.items()) {
    if (!gpu.value().is_object())
      return Status::InvalidArgument(where + "." + gpu.key() + ": not an object");
    for (const auto& by_ranks : gpu.value().items()) {
      const std::string at = where + "." + gpu.key() + "." + by_ranks.key();
      int64_t ranks = 0;
      if (!ParseNonNegativeInt(by_ranks.key(), &ranks) || ranks < 2 || ranks > 1 << 20)
        return Status::InvalidArgument(at + ": ranks must be an integer from 2 to 1048576");
      if (!by_ranks.value().is_array() || by_ranks.value().empty())
        return Status::InvalidArgument(at + ": not a list of [bytes, microseconds]");
      for (const auto& point : by_ranks.value()) {
        if (!point.is_array() || point.size() != 2 || !point[0].is_number() ||
            !point[1].is_number() || !(point[0].get<double>() > 0) || !(point[1].get<double>() > 0))
          return Status::InvalidArgument(at + ": " + point.dump() +
                                         ": not [bytes, microseconds], both positive");
        out->Add(gpu.key(), static_cast<int>(ranks), point[0].get<double>(),
                 point[1].get<double>());
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Calibration> CalibrationFromJson(const Json& j, const std::string& path) {
  JsonFields f(j, path);
  Calibration c;
  CostParams& p = c.params;
  if (!j.contains("params") || !j["params"].is_object()) {
    return Status::InvalidArgument(path + ": field 'params': missing (required object)");
  }
  // A misspelt or retired parameter would silently take its default: refused, by name.
  for (const auto& item : j["params"].items()) {
    const std::string& key = item.key();
    const bool known = key == "cuda_graph_batch_sizes" || key == "stream_interval" ||
                       key == "eager_launches_ahead" ||
                       std::ranges::any_of(kParamFields, [&](auto f) { return key == f.first; });
    if (known) continue;
    return Status::InvalidArgument(
        path + ": params: field '" + key + "': not a cost parameter" +
        (key == "gemm_m_half" ? " (an older fathom's small-M loss; refit it as gemm_stream_share "
                                "with `fathom profile compare --fit --out FILE`)"
                              : ""));
  }
  JsonFields pf(j["params"], path + ": params");
  for (const auto& [name, field] : kParamFields) p.*field = pf.Double(name, p.*field);
  p.cuda_graph_batch_sizes = pf.IntList("cuda_graph_batch_sizes", p.cuda_graph_batch_sizes);
  p.stream_interval = pf.Int("stream_interval", p.stream_interval);
  p.eager_launches_ahead = pf.Bool("eager_launches_ahead", p.eager_launches_ahead);
  FATHOM_RETURN_IF_ERROR(pf.status());
  FATHOM_RETURN_IF_ERROR(p.Validate().WithContext(path));
  if (j.contains("stddev") && j["stddev"].is_object()) {
    JsonFields sf(j["stddev"], path + ": stddev");
    for (int i = 0; i < CostParams::kNumFitted; ++i)
      c.stddev[i] = sf.Double(CostParams::kFitted[i], 0.0);
    FATHOM_RETURN_IF_ERROR(sf.status());
  }
  if (j.contains("fitted_hardware") && j["fitted_hardware"].is_array()) {
    for (const auto& h : j["fitted_hardware"]) {
      if (h.is_string()) c.fitted_hardware.push_back(h.get<std::string>());
    }
  }
  c.note = f.String("note", "");
  if (j.contains("all_reduce_tables")) {
    FATHOM_RETURN_IF_ERROR(
        ReadAllReduceTables(j["all_reduce_tables"], path + ": all_reduce_tables", &p.all_reduce));
  }
  return c;
}

OrderedJson ToJson(const Calibration& c) {
  const CostParams& p = c.params;
  OrderedJson j;
  j["note"] = c.note;
  j["fitted_hardware"] = c.fitted_hardware;
  OrderedJson params;
  for (const auto& [name, field] : kParamFields) params[name] = p.*field;
  if (!p.cuda_graph_batch_sizes.empty())
    params["cuda_graph_batch_sizes"] = p.cuda_graph_batch_sizes;
  if (p.stream_interval > 0) params["stream_interval"] = p.stream_interval;
  if (p.eager_launches_ahead) params["eager_launches_ahead"] = true;
  j["params"] = params;
  OrderedJson sd;
  for (int i = 0; i < CostParams::kNumFitted; ++i) sd[CostParams::kFitted[i]] = c.stddev[i];
  j["stddev"] = sd;
  if (!p.all_reduce.empty()) {
    OrderedJson tables;
    for (const auto& [key, points] : p.all_reduce.tables()) {
      OrderedJson list = OrderedJson::array();
      for (const auto& [bytes, us] : points) list.push_back({bytes, us});
      tables[key.first][std::to_string(key.second)] = list;
    }
    j["all_reduce_tables"] = tables;
  }
  return j;
}

std::string DefaultCalibrationPath() {
  // The newest stack's; a broken stacks file is then the file a load names.
  auto stacks = LoadStacks(DefaultStacksPath());
  return stacks.ok() ? stacks->back().CalibrationPath() : DefaultStacksPath();
}

void AllReduceTables::Add(const std::string& hardware, int ranks, double bytes, double us) {
  auto& points = tables_[{hardware, ranks}];
  points.emplace_back(bytes, us);
  std::sort(points.begin(), points.end());
}

std::optional<double> AllReduceTables::Seconds(const std::string& hardware, int ranks,
                                               double bytes) const {
  auto it = tables_.find({hardware, ranks});
  if (it == tables_.end()) return std::nullopt;
  auto us = InterpolateLogLog(it->second, bytes);
  if (!us) return std::nullopt;
  return *us * 1e-6;
}

Result<MeasuredGemms> MeasuredGemms::Load(const PerfDb& db, const std::string& hardware) {
  MeasuredGemms out;
  for (DType t : {DType::kBf16, DType::kFp8, DType::kNvfp4, DType::kMxfp4}) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<OpMeasurement> rows,
                            db.Query(hardware, "gemm", std::string(Name(t))));
    for (const auto& r : rows) out.Add(t, r.m, r.n, r.k, r.median_us * 1e-6);
  }
  return out;
}

void MeasuredGemms::Add(DType dtype, int64_t m, int64_t n, int64_t k, double seconds) {
  auto& points = tables_[{static_cast<int>(dtype), n, k}];
  points.emplace_back(static_cast<double>(m), seconds);
  std::sort(points.begin(), points.end());
}

std::optional<double> MeasuredGemms::Seconds(DType dtype, int64_t m, int64_t n, int64_t k) const {
  auto it = tables_.find({static_cast<int>(dtype), n, k});
  if (it == tables_.end()) {
    ++counters_->unmeasured;
    return std::nullopt;
  }
  const auto& points = it->second;
  const auto x = static_cast<double>(m);
  ++(x < points.front().first || x > points.back().first ? counters_->outside : counters_->within);
  return InterpolateLogLog(points, x);
}

MeasuredGemms::Coverage MeasuredGemms::coverage() const {
  return {counters_->within.load(), counters_->outside.load(), counters_->unmeasured.load()};
}

CalibratedModel::CalibratedModel(const ModelArch& m, const Hardware& hw,
                                 const ParallelLayout& layout, const Precision& precision,
                                 const CostParams& params, Runtime runtime,
                                 std::shared_ptr<const MeasuredGemms> measured, Fusions fusions)
    : OperatorTimeModel(m, layout, precision, fusions),
      hw_(hw),
      layout_(layout),
      p_(params),
      host_iteration_us_(runtime == Runtime::kCpp ? params.cpp_iteration_overhead_us
                                                  : params.iteration_overhead_us),
      host_per_sequence_us_(runtime == Runtime::kCpp ? params.cpp_per_sequence_overhead_us
                                                     : params.per_sequence_overhead_us),
      response_s_(runtime == Runtime::kCpp ? 0.0 : params.response_us * 1e-6),
      launches_ahead_(runtime == Runtime::kCpp),
      eager_ahead_(runtime != Runtime::kCpp && params.eager_launches_ahead),
      measured_(std::move(measured)) {
  set_monotone(measured_ == nullptr);
  const double launch_us = launches_ahead_ ? params.cpp_launch_us : params.eager_launch_us;
  for (int s = 0; s < num_stages(); ++s)
    launch_s_.push_back(static_cast<double>(Launches(s)) * launch_us * 1e-6);
  if (launches_ahead_) return;  // no CUDA graphs, no Python front
  graph_sizes_ = params.cuda_graph_batch_sizes;
  stream_interval_ = params.stream_interval;
}

namespace {

// A GEMM in `t` of `flops` over `weight_bytes` of weights, `bytes` of HBM traffic in all, streamed
// at `memory_efficiency` of the bandwidth: its math at the fraction of peak large GEMMs reach plus
// the small-M loss (a share of the weights' streaming time), or the whole traffic where that is
// longer; then the kernel floor.
double GemmSeconds(const CostParams& p, const Hardware& hw, DType t, double flops,
                   double weight_bytes, double bytes, double memory_efficiency,
                   double gemm_efficiency) {
  const double peak = hw.PeakFlops(t) * gemm_efficiency;
  const double bw = hw.hbm_bytes_per_s * memory_efficiency;
  return std::max(flops / peak + p.gemm_stream_share * weight_bytes / bw, bytes / bw) +
         p.kernel_floor_us * 1e-6;
}

// A collective's seconds: measured all-reduces within the scale-up domain from the tables, the
// rest from the collective formula; before any overlap with compute.
double CollectiveOpSeconds(const Operator& op, const Hardware& hw, const CostParams& p) {
  if (op.comm == CommKind::kAllReduce && op.span <= hw.scale_up_domain_gpus) {
    if (auto t = p.all_reduce.Seconds(hw.name, op.ranks, op.comm_bytes)) return *t;
  }
  return CollectiveSeconds(op, hw, p.link_efficiency, p.collective_latency_us * 1e-6,
                           p.collective_hop_latency_us * 1e-6);
}

}  // namespace

bool DequantisesExperts(const Operator& op, const Hardware& hw) {
  return op.kind == OpKind::kGroupedGemm && op.dtype == DType::kMxfp4 && !hw.HasFp4Cores();
}

double OperatorSeconds(const Operator& op, const Hardware& hw, const CostParams& p, int ep,
                       const MeasuredGemms* measured) {
  const double floor = p.kernel_floor_us * 1e-6;
  const double bw = hw.hbm_bytes_per_s * p.memory_efficiency;
  switch (op.kind) {
    case OpKind::kGemm: {
      if (op.m == 0) return 0.0;
      std::optional<double> gemm;
      if (measured) gemm = measured->Seconds(op.dtype, op.m, op.n, op.k);
      if (!gemm) {
        const double weights = static_cast<double>(op.n) * op.k * BytesPerElement(op.dtype);
        gemm = GemmSeconds(p, hw, op.dtype, op.flops, weights, op.bytes, p.memory_efficiency,
                           p.*GemmEfficiencyField(hw, op.dtype));
      }
      if (op.comm != CommKind::kAllReduce) return *gemm;
      // Fused with its all-reduce (Fusions::gemm_allreduce): within one NVLink domain each wave
      // of 128x128 output tiles is reduced while the next computes, so the kernel lasts the
      // longer of the two plus one wave's share of the shorter (a single-wave GEMM, a decode
      // step's, overlaps nothing); across domains, or with the GPU's SMs unknown, in turn.
      const double reduce = CollectiveOpSeconds(op, hw, p);
      if (op.span > hw.scale_up_domain_gpus || hw.sms <= 0) return *gemm + reduce;
      const double tiles = std::ceil(op.m / 128.0) * std::ceil(op.n / 128.0);
      const double waves = std::ceil(tiles / hw.sms);
      return std::max(*gemm, reduce) + std::min(*gemm, reduce) / waves;
    }
    case OpKind::kGroupedGemm: {
      if (op.m == 0) return 0.0;
      // Tokens reaching this GPU vary with the routing: the slowest of the EP GPUs sets the
      // pace. Per GPU the count is about Poisson(mean); the expected maximum of ep of them is
      // mean + sqrt(2 mean ln ep), widened by the skew.
      const double mean = static_cast<double>(op.m);
      const double spread =
          ep > 1 ? std::sqrt(2.0 * mean * std::log(static_cast<double>(ep))) : 0.0;
      const double rows = mean + spread * (1.0 + p.moe_skew);
      const double weights =
          std::max(1.0, op.active_groups) * op.n * op.k * BytesPerElement(op.dtype);
      if (DequantisesExperts(op, hw) && p.dequant_grouped_memory_efficiency > 0 &&
          p.dequant_gemm_efficiency > 0) {
        return GemmSeconds(p, hw, op.dtype, op.flops * rows / mean, weights, op.bytes,
                           p.dequant_grouped_memory_efficiency, p.dequant_gemm_efficiency);
      }
      const double streaming = op.dtype == DType::kFp8 && p.fp8_grouped_memory_efficiency > 0
                                   ? p.fp8_grouped_memory_efficiency
                                   : p.grouped_memory_efficiency;
      return GemmSeconds(p, hw, op.dtype, op.flops * rows / mean, weights, op.bytes, streaming,
                         p.*GemmEfficiencyField(hw, op.dtype));
    }
    case OpKind::kAttention: {
      const double peak = hw.PeakFlops(op.dtype == DType::kFp8 ? DType::kFp8 : DType::kBf16);
      return std::max(op.flops / (peak * p.attention_efficiency), op.bytes / bw) + floor;
    }
    case OpKind::kElementwise:
      return op.bytes / bw + floor;
    case OpKind::kCommunication:
      return CollectiveOpSeconds(op, hw, p) * (1.0 - p.comm_overlap);
  }
  return 0.0;
}

double CalibratedModel::OpSeconds(const Operator& op) const {
  return OperatorSeconds(op, hw_, p_, layout_.ep, measured_.get());
}

double CalibratedModel::AheadLaunchSeconds(int stage, bool cuda_graph) const {
  return launches_ahead_ || (eager_ahead_ && !cuda_graph) ? launch_s_[stage] : 0.0;
}

// Host work happens once per iteration, before its first stage; an eager iteration's launches
// on every stage, unless they run ahead of the GPU (AheadLaunchSeconds).
double CalibratedModel::EagerLaunchSeconds(int stage, bool cuda_graph) const {
  return launches_ahead_ || eager_ahead_ || cuda_graph ? 0.0 : launch_s_[stage];
}

double CalibratedModel::HostSeconds(int stage, int64_t sequences) const {
  return stage == 0 ? (host_iteration_us_ + host_per_sequence_us_ * sequences) * 1e-6 : 0.0;
}

}  // namespace fathom::models
