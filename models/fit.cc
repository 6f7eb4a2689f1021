#include "models/fit.h"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace fathom::models {
namespace {

// `base` with the GEMM curve p (GemmFit::kFields).
CostParams WithCurve(CostParams base, const double* p) {
  for (size_t i = 0; i < GemmFit::kFields.size(); ++i) base.*GemmFit::kFields[i] = p[i];
  return base;
}

// log(model) - log(measured) for one operator.
struct GemmResidual {
  Operator op;
  const Hardware* hw;
  CostParams base;
  double log_measured;
  bool operator()(const double* p, double* residual) const {
    residual[0] = std::log(OperatorSeconds(op, *hw, WithCurve(base, p), /*ep=*/1)) - log_measured;
    return true;
  }
};

// `base` with the collective price p = {link_efficiency, latency_us, hop_latency_us}.
CostParams WithLinks(CostParams base, const double* p) {
  base.link_efficiency = p[0];
  base.collective_latency_us = p[1];
  base.collective_hop_latency_us = p[2];
  return base;
}

struct CollectiveResidual {
  Operator op;
  const Hardware* hw;
  CostParams base;
  double log_measured;
  bool operator()(const double* p, double* residual) const {
    residual[0] = std::log(OperatorSeconds(op, *hw, WithLinks(base, p), /*ep=*/1)) - log_measured;
    return true;
  }
};

// Standard deviations of the N parameters at `p` from Ceres's covariance, scaled by the residual
// variance; zeros where the covariance cannot be computed.
template <int N>
std::array<double, N> Stddev(ceres::Problem& problem, double* p, double final_cost,
                             int measurements) {
  std::array<double, N> out{};
  ceres::Covariance::Options co;
  co.algorithm_type = ceres::DENSE_SVD;
  co.null_space_rank = -1;
  ceres::Covariance cov(co);
  std::vector<std::pair<const double*, const double*>> blocks = {{p, p}};
  if (!cov.Compute(blocks, &problem)) return out;
  double c[N * N];
  cov.GetCovarianceBlock(p, p, c);
  const double s2 = 2.0 * final_cost / std::max(1, measurements - N);
  for (int i = 0; i < N; ++i) out[i] = std::sqrt(std::max(0.0, c[i * N + i] * s2));
  return out;
}

// log(model) - log(measured) for one MoE layer (its operators summed) at grouped_memory_efficiency
// p[0] (kParams 1), or for a dequantising layer at dequant_grouped_memory_efficiency p[0] and
// dequant_gemm_efficiency p[1] (kParams 2).
template <int kParams>
struct ExpertResidual {
  std::vector<Operator> ops;
  const Hardware* hw;
  CostParams base;
  double log_measured;
  bool operator()(const double* p, double* residual) const {
    ExpertFit fit;
    fit.memory_efficiency = p[0];
    if constexpr (kParams == 2) {
      fit.dequantised = true;
      fit.math_efficiency = p[1];
    }
    residual[0] = std::log(MeasuredSeconds(ops, *hw, fit.Applied(base))) - log_measured;
    return true;
  }
};

// A MoE layer measured on a GPU that holds every expert.
bool IsWholeExpertLayer(const OpMeasurement& row) {
  return row.op == "moe" && DimValue(row.dims, "ep").value_or(0) == 1;
}

bool IsCollective(const std::string& op) {
  for (CommKind kind : {CommKind::kAllReduce, CommKind::kAllGather, CommKind::kReduceScatter,
                        CommKind::kAllToAll, CommKind::kSendRecv}) {
    if (op == Name(kind)) return true;
  }
  return false;
}

}  // namespace

Result<Operator> MeasuredOperator(const OpMeasurement& row) {
  const std::string shape = row.op + " " + std::to_string(row.m) + "x" + std::to_string(row.n) +
                            "x" + std::to_string(row.k) +
                            (row.dims.empty() ? "" : " (" + row.dims + ")");
  FATHOM_ASSIGN_OR_RETURN(DType dtype, ParseDType(row.dtype, "dtype"));
  if (row.op == "gemm" || row.op == "grouped_gemm") {
    if (row.m <= 0 || row.n <= 0 || row.k <= 0 || (row.op == "grouped_gemm" && row.extra <= 0)) {
      return Status::InvalidArgument(shape + ": M, N, K (and groups) must be positive");
    }
    if (row.op == "gemm") return Gemm("measured.gemm", 1, row.m, row.n, row.k, dtype);
    return GroupedGemm("measured.grouped_gemm", 1, row.m * row.extra, row.n, row.k, row.extra,
                       static_cast<double>(row.extra), dtype);
  }
  if (row.op == "attention_prefill" || row.op == "attention_decode") {
    AttentionHeads h;
    h.heads = DimValue(row.dims, "heads").value_or(0);
    h.kv_heads = DimValue(row.dims, "kv_heads").value_or(0);
    h.d_qk = DimValue(row.dims, "d_qk").value_or(0);
    h.d_v = DimValue(row.dims, "d_v").value_or(0);
    h.v_in_k = DimValue(row.dims, "v_in_k").value_or(0) != 0;
    const bool causal = DimValue(row.dims, "causal").value_or(0) != 0;
    if (h.heads <= 0 || h.kv_heads <= 0 || h.d_qk <= 0 || h.d_v <= 0) {
      return Status::InvalidArgument(shape +
                                     ": dims must give positive heads, kv_heads, d_qk and d_v");
    }
    if (row.m <= 0 || row.n <= 0 || row.k <= 0 || (causal && row.k > row.n)) {
      return Status::InvalidArgument(shape +
                                     ": sequences, K/V length and query tokens must be positive" +
                                     (causal ? ", the queries no more than the K/V length" : ""));
    }
    // Causal queries are the last k of the n positions: the i-th sees n - k + 1 + i keys.
    const double q = static_cast<double>(row.k), n = static_cast<double>(row.n);
    const double pairs_per_sequence = causal ? q * (n - q) + q * (q + 1) / 2 : q * n;
    return AttentionKernel("measured.attention", 1, h, row.m * pairs_per_sequence, row.m * n,
                           row.m * q, dtype);
  }
  for (CommKind kind : {CommKind::kAllReduce, CommKind::kAllGather, CommKind::kReduceScatter,
                        CommKind::kAllToAll, CommKind::kSendRecv}) {
    if (row.op != Name(kind)) continue;
    if (row.m <= 0 || row.extra < 2) {
      return Status::InvalidArgument(shape +
                                     ": bytes (m) must be positive and ranks (extra) at least 2");
    }
    const int ranks = static_cast<int>(row.extra);
    // Ranks on more than one node ("nodes=2") cross the scale-out network: a span no scale-up
    // domain holds.
    const int64_t nodes = DimValue(row.dims, "nodes").value_or(1);
    if (nodes < 1) return Status::InvalidArgument(shape + ": nodes must be >= 1");
    return Comm("measured.collective", 1, kind, static_cast<double>(row.m), ranks,
                nodes > 1 ? 1 << 30 : ranks);
  }
  return Status::NotFound("op '" + row.op + "': not priced from its shape alone");
}

double MeasuredSeconds(const std::vector<Operator>& ops, const Hardware& hw, const CostParams& p) {
  double seconds = 0;
  for (const Operator& op : ops) seconds += OperatorSeconds(op, hw, p, /*ep=*/1);
  return seconds;
}

Result<std::vector<Operator>> MeasuredOperators(const OpMeasurement& row) {
  if (row.op != "moe") {
    FATHOM_ASSIGN_OR_RETURN(Operator op, MeasuredOperator(row));
    return std::vector<Operator>{op};
  }
  FATHOM_ASSIGN_OR_RETURN(DType dtype, ParseDType(row.dtype, "dtype"));
  const int64_t topk = DimValue(row.dims, "topk").value_or(0);
  const int64_t tp = DimValue(row.dims, "tp").value_or(0);
  const int64_t ep = DimValue(row.dims, "ep").value_or(0);
  if (row.m <= 0 || row.n <= 0 || row.k <= 0 || row.extra <= 0 || topk <= 0 || topk > row.extra ||
      tp <= 0 || ep <= 0 || row.extra % ep != 0 || row.n % tp != 0) {
    return Status::InvalidArgument(
        "moe " + std::to_string(row.m) + "x" + std::to_string(row.n) + "x" + std::to_string(row.k) +
        " (" + row.dims + "), " + std::to_string(row.extra) +
        " experts: tokens, sizes, topk (at most the experts), tp and ep must be positive, ep "
        "dividing the experts and tp the intermediate");
  }
  std::vector<Operator> ops;
  AddRoutedExperts({row.k, row.n, row.extra, topk, Routing::kBalanced}, row.m, static_cast<int>(ep),
                   static_cast<int>(tp), dtype, 1, &ops);
  return ops;
}

CostParams GemmFit::Applied(const CostParams& base) const {
  CostParams p = base;
  for (size_t i = 0; i < kFields.size(); ++i) {
    if (Fitted(static_cast<int>(i))) p.*kFields[i] = value[i];
  }
  return p;
}

Result<GemmFit> FitGemmCurve(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                             const CostParams& start) {
  constexpr int kN = static_cast<int>(GemmFit::kFields.size());
  GemmFit shape;  // the rows on each kind of tensor core
  std::vector<Operator> ops;
  std::vector<double> log_measured;
  for (const OpMeasurement& row : rows) {
    if ((row.op != "gemm" && row.op != "grouped_gemm") || !(row.median_us > 0))
      continue;  // not a GEMM; no time
    Result<Operator> op = MeasuredOperator(row);
    if (!op.ok()) return op.status();
    const auto field = GemmEfficiencyField(hw, op->dtype);
    for (int i = 0; i < 3; ++i) shape.rows_per_core[i] += GemmFit::kFields[i] == field;
    ops.push_back(*op);
    log_measured.push_back(std::log(row.median_us * 1e-6));
  }
  shape.measurements = static_cast<int>(ops.size());
  if (ops.size() < 5) return Status::InvalidArgument("GEMM fit needs at least 5 measurements");
  // Efficiencies of tensor cores no row ran on stay as they were.
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    if (!shape.Fitted(i)) held.push_back(i);
  }
  // The price is a max of compute and memory terms, flat in whichever does not bind: a local
  // solver stays wherever the start puts each row. Solve from the start and from the corners of
  // a coarse grid of plausible curves, and keep the best.
  std::array<double, kN> from_start;
  for (int i = 0; i < kN; ++i) from_start[i] = start.*GemmFit::kFields[i];
  std::vector<std::array<double, kN>> starts = {from_start};
  for (double eff : {0.5, 0.9}) {
    for (double mem : {0.5, 0.9}) {
      std::array<double, kN> corner = {eff, eff, eff, 0.5, 3.0, mem};
      for (int i : held) corner[i] = from_start[i];
      starts.push_back(corner);
    }
  }
  std::optional<GemmFit> best;
  double best_cost = 0;
  for (const auto& from : starts) {
    std::array<double, kN> p = from;
    ceres::Problem problem;
    for (size_t i = 0; i < ops.size(); ++i) {
      problem.AddResidualBlock(
          new ceres::NumericDiffCostFunction<GemmResidual, ceres::CENTRAL, 1, kN>(
              new GemmResidual{ops[i], &hw, start, log_measured[i]}),
          new ceres::SoftLOneLoss(0.1), p.data());
    }
    for (int i : {0, 1, 2, 5}) {  // fractions
      problem.SetParameterLowerBound(p.data(), i, i == 5 ? 0.05 : 0.01);
      problem.SetParameterUpperBound(p.data(), i, 1.0);
    }
    problem.SetParameterLowerBound(p.data(), 3, 0.0);
    problem.SetParameterLowerBound(p.data(), 4, 0.0);
    if (!held.empty()) problem.SetManifold(p.data(), new ceres::SubsetManifold(kN, held));
    ceres::Solver::Options options;
    options.max_num_iterations = 200;
    ceres::Solver::Summary summary;
    ceres::Solve(options, &problem, &summary);
    if (!summary.IsSolutionUsable()) continue;
    if (best && summary.final_cost >= best_cost) continue;
    GemmFit fit = shape;
    fit.value = p;
    fit.rms_log_error = std::sqrt(2.0 * summary.final_cost / fit.measurements);
    fit.stddev = Stddev<kN>(problem, p.data(), summary.final_cost, fit.measurements);
    best = fit;
    best_cost = summary.final_cost;
  }
  if (!best) return Status::InvalidArgument("GEMM fit failed from every start");
  return *best;
}

CostParams OperatorFits::Applied(const CostParams& base) const {
  CostParams p = base;
  if (gemm) p = gemm->Applied(p);
  if (links) p = links->Applied(p);
  if (experts) p = experts->Applied(p);
  if (dequantised_experts) p = dequantised_experts->Applied(p);
  return p;
}

CostParams ExpertFit::Applied(const CostParams& base) const {
  CostParams p = base;
  if (dequantised) {
    p.dequant_grouped_memory_efficiency = memory_efficiency;
    p.dequant_gemm_efficiency = math_efficiency;
  } else {
    p.grouped_memory_efficiency = memory_efficiency;
  }
  return p;
}

namespace {

// Whether a whole MoE layer's experts (its operators) dequantise their weights on `hw`.
bool Dequantised(const std::vector<Operator>& ops, const Hardware& hw) {
  return std::any_of(ops.begin(), ops.end(),
                     [&](const Operator& op) { return DequantisesExperts(op, hw); });
}

}  // namespace

Result<ExpertFit> FitExpertStreaming(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                                     const CostParams& start, bool dequantised) {
  // A dequantising fit starts from the native rate and the BF16 GEMM efficiency.
  double p[2] = {start.grouped_memory_efficiency, start.gemm_efficiency};
  if (dequantised && start.dequant_grouped_memory_efficiency > 0 &&
      start.dequant_gemm_efficiency > 0) {
    p[0] = start.dequant_grouped_memory_efficiency;
    p[1] = start.dequant_gemm_efficiency;
  }
  const int n = dequantised ? 2 : 1;
  ceres::Problem problem;
  ExpertFit fit;
  fit.dequantised = dequantised;
  for (const OpMeasurement& row : rows) {
    if (!IsWholeExpertLayer(row) || !(row.median_us > 0)) continue;
    FATHOM_ASSIGN_OR_RETURN(std::vector<Operator> ops, MeasuredOperators(row));
    if (Dequantised(ops, hw) != dequantised) continue;
    const double log_measured = std::log(row.median_us * 1e-6);
    ceres::CostFunction* cost =
        dequantised
            ? static_cast<ceres::CostFunction*>(
                  new ceres::NumericDiffCostFunction<ExpertResidual<2>, ceres::CENTRAL, 1, 2>(
                      new ExpertResidual<2>{std::move(ops), &hw, start, log_measured}))
            : new ceres::NumericDiffCostFunction<ExpertResidual<1>, ceres::CENTRAL, 1, 1>(
                  new ExpertResidual<1>{std::move(ops), &hw, start, log_measured});
    problem.AddResidualBlock(cost, new ceres::SoftLOneLoss(0.1), p);
    ++fit.measurements;
  }
  if (fit.measurements < 3) {
    return Status::InvalidArgument(std::string("expert streaming fit needs at least 3 MoE layers") +
                                   (dequantised ? " that dequantise their weights" : "") +
                                   " at ep 1");
  }
  for (int i = 0; i < n; ++i) {
    problem.SetParameterLowerBound(p, i, 0.05);
    problem.SetParameterUpperBound(p, i, 1.0);
  }
  ceres::Solver::Options options;
  options.max_num_iterations = 100;
  ceres::Solver::Summary summary;
  ceres::Solve(options, &problem, &summary);
  if (!summary.IsSolutionUsable())
    return Status::InvalidArgument("expert streaming fit failed: " + summary.message);
  fit.memory_efficiency = p[0];
  fit.rms_log_error = std::sqrt(2.0 * summary.final_cost / fit.measurements);
  if (dequantised) {
    const auto sd = Stddev<2>(problem, p, summary.final_cost, fit.measurements);
    fit.memory_stddev = sd[0];
    fit.math_efficiency = p[1];
    fit.math_stddev = sd[1];
  } else {
    fit.memory_stddev = Stddev<1>(problem, p, summary.final_cost, fit.measurements)[0];
  }
  return fit;
}

Result<OperatorFits> FitOperators(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                                  const CostParams& start) {
  int gemms = 0, collectives = 0, expert_layers[2] = {0, 0};  // native, dequantising
  for (const OpMeasurement& row : rows) {
    gemms += row.op == "gemm" || row.op == "grouped_gemm";
    collectives += IsCollective(row.op);
    if (!IsWholeExpertLayer(row)) continue;
    FATHOM_ASSIGN_OR_RETURN(const std::vector<Operator> ops, MeasuredOperators(row));
    ++expert_layers[Dequantised(ops, hw)];
  }
  OperatorFits out;
  if (gemms >= 5) {
    FATHOM_ASSIGN_OR_RETURN(out.gemm, FitGemmCurve(rows, hw, start));
  }
  if (collectives >= 3) {
    FATHOM_ASSIGN_OR_RETURN(out.links, FitCollectives(rows, hw, start));
  }
  // On the GEMM curve just fitted, where there is one.
  const CostParams on_curve = out.gemm ? out.gemm->Applied(start) : start;
  if (expert_layers[0] >= 3) {
    FATHOM_ASSIGN_OR_RETURN(out.experts, FitExpertStreaming(rows, hw, on_curve));
  }
  if (expert_layers[1] >= 3) {
    FATHOM_ASSIGN_OR_RETURN(out.dequantised_experts,
                            FitExpertStreaming(rows, hw, on_curve, /*dequantised=*/true));
  }
  if (!out.gemm && !out.links && !out.experts && !out.dequantised_experts) {
    return Status::InvalidArgument(
        "nothing to fit: needs at least 5 GEMM, 3 collective or 3 single-GPU MoE layer "
        "measurements");
  }
  return out;
}

CostParams CollectiveFit::Applied(const CostParams& base) const {
  const double p[3] = {link_efficiency, latency_us, hop_latency_us};
  return WithLinks(base, p);
}

Result<CollectiveFit> FitCollectives(const std::vector<OpMeasurement>& rows, const Hardware& hw,
                                     const CostParams& start) {
  double p[3] = {start.link_efficiency, start.collective_latency_us,
                 start.collective_hop_latency_us};
  ceres::Problem problem;
  CollectiveFit fit;
  for (const OpMeasurement& row : rows) {
    if (!IsCollective(row.op) || !(row.median_us > 0)) continue;
    Result<Operator> op = MeasuredOperator(row);
    if (!op.ok()) return op.status();
    problem.AddResidualBlock(
        new ceres::NumericDiffCostFunction<CollectiveResidual, ceres::CENTRAL, 1, 3>(
            new CollectiveResidual{*op, &hw, start, std::log(row.median_us * 1e-6)}),
        new ceres::SoftLOneLoss(0.1), p);
    ++fit.measurements;
  }
  if (fit.measurements < 3)
    return Status::InvalidArgument("collective fit needs at least 3 measurements");
  problem.SetParameterLowerBound(p, 0, 0.01);
  problem.SetParameterUpperBound(p, 0, 1.0);
  problem.SetParameterLowerBound(p, 1, 0.0);
  problem.SetParameterLowerBound(p, 2, 0.0);
  ceres::Solver::Options options;
  options.max_num_iterations = 200;
  ceres::Solver::Summary summary;
  ceres::Solve(options, &problem, &summary);
  if (!summary.IsSolutionUsable())
    return Status::InvalidArgument("collective fit failed: " + summary.message);
  fit.link_efficiency = p[0];
  fit.latency_us = p[1];
  fit.hop_latency_us = p[2];
  fit.rms_log_error = std::sqrt(2.0 * summary.final_cost / fit.measurements);
  fit.stddev = Stddev<3>(problem, p, summary.final_cost, fit.measurements);
  return fit;
}

}  // namespace fathom::models
