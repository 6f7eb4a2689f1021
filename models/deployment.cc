#include "models/deployment.h"

namespace fathom::models {
namespace {

Status Rule(const std::string& degree, int value, const std::string& rule) {
  return Status::InvalidArgument(degree + " = " + std::to_string(value) + ": " + rule);
}

}  // namespace

Result<Deployment> ResolveDeployment(const DeploymentRequest& request) {
  DeploymentRequest r = request;
  if (r.model.empty()) {
    r.model = kDefaultModel;
    if (r.gpus == 0 && r.tp == 0) r.gpus = kDefaultLayout.gpus;
    if (r.ep == 0) r.ep = kDefaultLayout.ep;
    if (r.attn_dp == 0) r.attn_dp = kDefaultLayout.attn_dp;
    if (r.weights.empty()) r.weights = kDefaultWeights;
    if (r.kv.empty()) r.kv = kDefaultKv;
  }
  if (r.hardware.empty()) r.hardware = kDefaultHardware;
  if (r.pp == 0) r.pp = 1;
  if (r.tp == 0) r.tp = r.gpus > 0 ? r.gpus / r.pp : 1;
  if (r.gpus == 0) r.gpus = r.tp * r.pp;
  if (r.ep == 0) r.ep = 1;
  if (r.attn_dp == 0) r.attn_dp = 1;

  Deployment d;
  FATHOM_ASSIGN_OR_RETURN(d.model, LoadModel(r.model));
  FATHOM_ASSIGN_OR_RETURN(HardwareCatalog catalog, HardwareCatalog::Load(r.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(d.hardware, catalog.Find(r.hardware));
  d.layout = {r.gpus, r.tp, r.pp, r.ep, r.attn_dp};
  FATHOM_RETURN_IF_ERROR(ValidateLayout(d.model, d.layout).WithContext(d.model.name));

  d.precision.moe_weights = d.model.native_moe_weights;
  d.precision.dense_weights = d.model.native_dense_weights;
  if (!r.weights.empty()) {
    FATHOM_ASSIGN_OR_RETURN(DType w, ParseDType(r.weights, "--weights"));
    d.precision.moe_weights = w;
    d.precision.dense_weights = w;
  }
  if (!r.dense_weights.empty()) {
    FATHOM_ASSIGN_OR_RETURN(d.precision.dense_weights,
                            ParseDType(r.dense_weights, "--dense-weights"));
  }
  if (!r.kv.empty()) {
    FATHOM_ASSIGN_OR_RETURN(d.precision.kv, ParseDType(r.kv, "--kv"));
  }
  return d;
}

Result<Runtime> ParseRuntime(std::string_view s) {
  if (s == "python") return Runtime::kPython;
  if (s == "cpp") return Runtime::kCpp;
  return Status::InvalidArgument("runtime = \"" + std::string(s) +
                                 "\": unknown (one of python, cpp)");
}

std::string_view Name(Runtime r) { return r == Runtime::kCpp ? "cpp" : "python"; }

std::string ParallelLayout::ToString() const {
  return "TP" + std::to_string(tp) + " PP" + std::to_string(pp) + " EP" + std::to_string(ep) +
         " attnDP" + std::to_string(attn_dp) + " x" + std::to_string(replicas());
}

Status ValidateLayout(const ModelArch& m, const ParallelLayout& l) {
  if (l.gpus < 1) return Rule("gpus", l.gpus, "must be >= 1");
  if (l.tp < 1) return Rule("tp", l.tp, "must be >= 1");
  if (l.pp < 1) return Rule("pp", l.pp, "must be >= 1");
  if (l.ep < 1) return Rule("ep", l.ep, "must be >= 1");
  if (l.attn_dp < 1) return Rule("attn_dp", l.attn_dp, "must be >= 1");
  const int64_t tp_pp = int64_t{l.tp} * l.pp;  // in int64: each may be as large as an int
  if (l.gpus % tp_pp != 0) {
    return Rule(
        "gpus", l.gpus,
        "must be a multiple of tp x pp (" + std::to_string(tp_pp) + "): GPUs = tp x pp x replicas");
  }
  if (l.pp > m.layers) {
    return Rule("pp", l.pp, "must be <= num_hidden_layers (" + std::to_string(m.layers) + ")");
  }
  if (l.tp % l.attn_dp != 0) {
    return Rule("attn_dp", l.attn_dp,
                "must divide tp (" + std::to_string(l.tp) +
                    "): attention data parallelism splits the tensor-parallel group");
  }
  const int attn_tp = l.attn_tp();
  if (m.heads % attn_tp != 0) {
    return Rule("attention tp (tp / attn_dp)", attn_tp,
                "must divide num_attention_heads (" + std::to_string(m.heads) + ")");
  }
  if (m.attention == AttentionKind::kGqa && m.kv_heads % attn_tp != 0 &&
      attn_tp % m.kv_heads != 0) {
    return Rule("attention tp (tp / attn_dp)", attn_tp,
                "must divide num_key_value_heads (" + std::to_string(m.kv_heads) +
                    ") or be a multiple of it");
  }
  if (m.NumMoeLayers() < m.layers && m.intermediate % attn_tp != 0) {
    return Rule("attention tp (tp / attn_dp)", attn_tp,
                "must divide intermediate_size (" + std::to_string(m.intermediate) + ")");
  }
  if (!m.is_moe()) {
    if (l.ep != 1) return Rule("ep", l.ep, "must be 1: " + m.name + " has no experts");
    return Status::Ok();
  }
  if (l.tp % l.ep != 0) {
    return Rule("ep", l.ep,
                "must divide tp (" + std::to_string(l.tp) +
                    "): experts are sharded over GPUs of the tensor-parallel group");
  }
  if (m.experts % l.ep != 0) {
    return Rule("ep", l.ep,
                "must divide the number of experts (" + std::to_string(m.experts) + ")");
  }
  if (m.moe_intermediate % l.moe_tp() != 0) {
    return Rule("expert tp (tp / ep)", l.moe_tp(),
                "must divide moe_intermediate_size (" + std::to_string(m.moe_intermediate) + ")");
  }
  return Status::Ok();
}

std::vector<int64_t> LayersPerStage(int64_t layers, int pp) {
  std::vector<int64_t> out(pp, layers / pp);
  for (int64_t i = 0; i < layers % pp; ++i) ++out[i];
  return out;
}

}  // namespace fathom::models
