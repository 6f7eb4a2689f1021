#include "models/hardware.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "base/files.h"
#include "base/format.h"
#include "base/json_fields.h"

namespace fathom::models {

double Hardware::PeakFlops(DType t) const {
  switch (t) {
    case DType::kMxfp4:
      // MXFP4 weights meet wider activations: MXFP8 where FP4 cores run them (TensorRT-LLM's
      // MoE backend on Blackwell), BF16 elsewhere (its Triton backend on Hopper).
      return HasFp4Cores() ? PeakFlops(DType::kFp8) : peak_bf16_flops;
    case DType::kNvfp4:
      if (HasFp4Cores()) return peak_fp4_flops;
      [[fallthrough]];
    case DType::kFp8:
      if (peak_fp8_flops > 0) return peak_fp8_flops;
      [[fallthrough]];
    default:
      return peak_bf16_flops;
  }
}

double CostPerMillionTokens(double usd_per_gpu_hour, double tokens_per_s_per_gpu) {
  return tokens_per_s_per_gpu > 0 ? usd_per_gpu_hour / (tokens_per_s_per_gpu * 3600.0) * 1e6 : 0.0;
}

Result<Hardware> LoadHardwareFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json doc, ReadJsonFile(path));
  JsonFields f(doc, path);
  Hardware hw;
  hw.name = f.String("name");
  hw.description = f.String("description", "");
  hw.vendor = f.String("vendor", "");
  // As typed, checked below before the conversion to bytes, FLOP/s.
  const double memory_gb = f.Double("memory_gb");
  const double hbm_tb_per_s = f.Double("hbm_bandwidth_tb_per_s");
  const double scale_up_gb_per_s = f.Double("scale_up_gb_per_s");
  const int64_t domain = f.Int("scale_up_domain_gpus");
  const double scale_out_gbit_per_s = f.Double("scale_out_gbit_per_s");
  const int64_t sms = f.Int("sms", 0);
  hw.power_watts = f.Double("power_watts", 0.0);
  hw.price_per_gpu_hour_usd = f.Double("price_per_gpu_hour_usd", 0.0);
  FATHOM_RETURN_IF_ERROR(f.status());
  if (!doc.contains("dense_tflops") || !doc["dense_tflops"].is_object()) {
    return Status::InvalidArgument(path +
                                   ": field 'dense_tflops': missing (required object with "
                                   "bf16 and optionally fp8, fp4 in TFLOP/s)");
  }
  JsonFields peaks(doc["dense_tflops"], path + ": dense_tflops");
  const double bf16 = peaks.Double("bf16"), fp8 = peaks.Double("fp8", 0.0),
               fp4 = peaks.Double("fp4", 0.0);
  FATHOM_RETURN_IF_ERROR(peaks.status());

  // Physical ranges, generous enough for any accelerator: a value outside one is a typo or a unit
  // slip (1e-9 TB/s, 1e300 GB) that would otherwise make the simulation meaningless. NaN fails.
  auto in_range = [&](const char* field, double as_typed, double lo, double hi) -> Status {
    if (as_typed >= lo && as_typed <= hi) return Status::Ok();
    return Status::InvalidArgument(path + ": field '" + field + "' = " + StrFormat("%g", as_typed) +
                                   ": must be in [" + StrFormat("%g", lo) + ", " +
                                   StrFormat("%g", hi) + "]");
  };
  if (hw.name.empty())
    return Status::InvalidArgument(path + ": field 'name' = \"\": must not be empty");
  FATHOM_RETURN_IF_ERROR(in_range("memory_gb", memory_gb, 1, 1e5));
  FATHOM_RETURN_IF_ERROR(in_range("hbm_bandwidth_tb_per_s", hbm_tb_per_s, 0.01, 1000));
  FATHOM_RETURN_IF_ERROR(in_range("dense_tflops.bf16", bf16, 1, 1e6));
  if (fp8 != 0) FATHOM_RETURN_IF_ERROR(in_range("dense_tflops.fp8", fp8, 1, 1e6));
  if (fp4 != 0) FATHOM_RETURN_IF_ERROR(in_range("dense_tflops.fp4", fp4, 1, 1e6));
  FATHOM_RETURN_IF_ERROR(in_range("scale_up_gb_per_s", scale_up_gb_per_s, 0.1, 1e6));
  FATHOM_RETURN_IF_ERROR(in_range("scale_up_domain_gpus", static_cast<double>(domain), 1, 1e5));
  FATHOM_RETURN_IF_ERROR(in_range("scale_out_gbit_per_s", scale_out_gbit_per_s, 0.1, 1e6));
  if (doc.contains("sms"))
    FATHOM_RETURN_IF_ERROR(in_range("sms", static_cast<double>(sms), 1, 1e5));
  if (doc.contains("power_watts"))
    FATHOM_RETURN_IF_ERROR(in_range("power_watts", hw.power_watts, 1, 1e5));
  FATHOM_RETURN_IF_ERROR(in_range("price_per_gpu_hour_usd", hw.price_per_gpu_hour_usd, 0, 1e4));
  hw.memory_bytes = memory_gb * 1e9;
  hw.hbm_bytes_per_s = hbm_tb_per_s * 1e12;
  hw.peak_bf16_flops = bf16 * 1e12;
  hw.peak_fp8_flops = fp8 * 1e12;
  hw.peak_fp4_flops = fp4 * 1e12;
  hw.scale_up_bytes_per_s = scale_up_gb_per_s * 1e9;
  hw.scale_up_domain_gpus = static_cast<int>(domain);
  hw.scale_out_bytes_per_s = scale_out_gbit_per_s * 1e9 / 8.0;
  hw.sms = static_cast<int>(sms);
  return hw;
}

Result<HardwareCatalog> HardwareCatalog::LoadBuiltin() {
  HardwareCatalog catalog;
  const std::filesystem::path dir = std::filesystem::path(DataDir()) / "models" / "hardware";
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  if (ec) return Status::NotFound(dir.string() + ": cannot list the hardware catalogue");
  std::sort(files.begin(), files.end());
  for (const auto& file : files) FATHOM_RETURN_IF_ERROR(catalog.AddFile(file));
  return catalog;
}

Result<HardwareCatalog> HardwareCatalog::Load(const std::vector<std::string>& extra_files) {
  FATHOM_ASSIGN_OR_RETURN(HardwareCatalog catalog, LoadBuiltin());
  for (const auto& file : extra_files) FATHOM_RETURN_IF_ERROR(catalog.AddFile(file));
  return catalog;
}

Status HardwareCatalog::AddFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Hardware hw, LoadHardwareFile(path));
  by_name_[hw.name] = std::move(hw);
  return Status::Ok();
}

Result<Hardware> HardwareCatalog::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  std::string known;
  for (const auto& [n, hw] : by_name_) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound("hardware '" + name + "': unknown (known: " + known +
                          "; add your own with --hardware-file)");
}

std::vector<const Hardware*> HardwareCatalog::All() const {
  std::vector<const Hardware*> out;
  for (const auto& [n, hw] : by_name_) out.push_back(&hw);
  return out;
}

Result<std::string> CatalogNameForDevice(std::string_view device) {
  std::string upper(device);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto has = [&](const char* s) { return upper.find(s) != std::string::npos; };
  // Most specific first: a GB200 is not a B200, a GH200 not an H200, an H200 NVL not an H200 SXM.
  // nvidia-smi names the GH200s "NVIDIA GH200 480GB" (96 GB HBM3) and "... 144G HBM3e".
  if (has("GB300")) return std::string("gb300");
  if (has("GH200")) return std::string(has("144") || has("HBM3E") ? "gh200-144gb" : "gh200");
  if (has("GB200")) return std::string("gb200");
  if (has("B300")) return std::string("b300");
  if (has("B200")) return std::string("b200");
  if (has("H200") && has("NVL")) return std::string("h200-nvl");
  if (has("H200")) return std::string("h200");
  if (has("H100") && has("NVL")) return std::string("h100-nvl");
  if (has("H100") && !has("PCIE")) return std::string("h100-sxm");
  if (has("A100") && !has("PCIE"))
    return std::string(has("80GB") ? "a100-sxm-80gb" : "a100-sxm-40gb");
  if (has("L40S")) return std::string("l40s");
  if (has("RTX PRO 6000")) return std::string("rtx-pro-6000");
  if (has("MI355X")) return std::string("mi355x");
  if (has("MI325X")) return std::string("mi325x");
  if (has("MI300X")) return std::string("mi300x");
  return Status::NotFound("GPU '" + std::string(device) + "': not in the built-in catalogue");
}

}  // namespace fathom::models
