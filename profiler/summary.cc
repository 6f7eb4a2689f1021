#include "profiler/summary.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace fathom::profiler {
namespace {

bool Contains(const std::string& haystack, std::initializer_list<const char*> needles) {
  for (const char* n : needles) {
    if (haystack.find(n) != std::string::npos) return true;
  }
  return false;
}

std::vector<TimeShare> Sorted(const std::map<std::string, TimeShare>& m) {
  std::vector<TimeShare> out;
  for (const auto& [k, v] : m) out.push_back(v);
  std::stable_sort(out.begin(), out.end(),
                   [](const TimeShare& a, const TimeShare& b) { return a.total_us > b.total_us; });
  return out;
}

}  // namespace

std::string ClassifyKernel(const models::KernelRecord& k) {
  if (k.kind == "memcpy" || k.kind == "memset") return k.kind;
  std::string n = k.name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  // Attention first: FlashAttention's split-KV "combine" kernel is not an MoE combine.
  if (Contains(n, {"flash", "fmha", "attention", "attn", "mla", "paged", "xqa"}))
    return "attention";
  if (Contains(n, {"nccl", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter",
                   "alltoall", "all_to_all", "deepep", "dispatch", "combine"}))
    return "communication";
  if (Contains(n, {"moe", "expert", "grouped", "topk_gating", "router"})) return "moe";
  if (Contains(n,
               {"gemm", "xmma", "cutlass", "cublas", "nvjet", "matmul", "gemv", "sm90_", "sm100_"}))
    return "gemm";
  if (Contains(n, {"elementwise", "norm", "silu", "gelu", "act_and_mul", "softmax", "rotary",
                   "rope", "reduce", "vectorized", "copy", "cat", "fill"}))
    return "elementwise";
  return "other";
}

ProfileSummary Summarize(const std::vector<models::KernelRecord>& records) {
  std::map<std::string, TimeShare> by_name, by_range, by_kind;
  ProfileSummary s;
  for (const auto& k : records) {
    const double us = static_cast<double>(k.end_ns - k.start_ns) / 1e3;
    auto add = [&](std::map<std::string, TimeShare>& m, const std::string& key) {
      TimeShare& t = m[key];
      t.key = key;
      ++t.count;
      t.total_us += us;
    };
    add(by_name, k.name);
    add(by_range, k.nvtx_range.empty() ? "(none)" : k.nvtx_range);
    add(by_kind, ClassifyKernel(k));
    s.total_us += us;
    ++s.records;
  }
  s.kernels = Sorted(by_name);
  s.ranges = Sorted(by_range);
  s.kinds = Sorted(by_kind);
  return s;
}

OrderedJson ProfileSummary::ToJson(size_t top) const {
  auto list = [&](const std::vector<TimeShare>& v, size_t n) {
    OrderedJson a = OrderedJson::array();
    for (size_t i = 0; i < v.size() && i < n; ++i) {
      a.push_back({{"name", v[i].key},
                   {"count", v[i].count},
                   {"total_us", v[i].total_us},
                   {"mean_us", v[i].mean_us()},
                   {"share", total_us > 0 ? v[i].total_us / total_us : 0.0}});
    }
    return a;
  };
  OrderedJson j;
  j["records"] = records;
  j["total_us"] = total_us;
  j["top_kernels"] = list(kernels, top);
  j["by_nvtx_range"] = list(ranges, ranges.size());
  j["by_operator_kind"] = list(kinds, kinds.size());
  return j;
}

}  // namespace fathom::profiler
