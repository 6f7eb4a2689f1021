// GPU specifications, loaded at run time from models/hardware/*.json (one file per GPU).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/dtype.h"

namespace fathom::models {

struct Hardware {
  std::string name;
  std::string description;
  std::string vendor;
  double memory_bytes = 0;  // usable HBM
  double hbm_bytes_per_s = 0;
  double peak_bf16_flops = 0;  // dense tensor-core peaks
  double peak_fp8_flops = 0;   // 0 where the format is not supported
  double peak_fp4_flops = 0;
  double scale_up_bytes_per_s = 0;   // per GPU, both directions together, as datasheets give it
  int scale_up_domain_gpus = 0;      // GPUs one scale-up fabric joins (8 for HGX, 72 for NVL72)
  double scale_out_bytes_per_s = 0;  // per GPU, one direction
  // Streaming multiprocessors (AMD: compute units), which a GEMM's output tiles fill in waves;
  // 0: unknown.
  int sms = 0;
  double power_watts = 0;
  double price_per_gpu_hour_usd = 0;

  // Whether block-scaled FP4 (NVFP4, MXFP4) runs natively on tensor cores.
  bool HasFp4Cores() const { return peak_fp4_flops > 0; }
  // Dense peak for GEMMs with weights in `t`; formats without native support run at the next
  // wider one. NVFP4 checkpoints quantise activations to FP4 too; MXFP4 ones (gpt-oss) run them
  // in MXFP8 on GPUs with FP4 cores and in BF16 on others (TensorRT-LLM's GPT-OSS deployment
  // guide, its MoE backend support matrix), so at the FP8 or BF16 rate.
  double PeakFlops(DType t) const;
};

// What a million generated tokens cost at `usd_per_gpu_hour` when each GPU produces
// `tokens_per_s_per_gpu`; 0 when nothing is produced.
double CostPerMillionTokens(double usd_per_gpu_hour, double tokens_per_s_per_gpu);

// Parses one hardware JSON file; errors name the file, the field and the rule.
Result<Hardware> LoadHardwareFile(const std::string& path);

// The catalogue name of a GPU as CUDA and nvidia-smi name it ("NVIDIA H100 80GB HBM3" is
// h100-sxm); NotFound for GPUs the built-in catalogue does not hold (an H100 PCIe, say).
Result<std::string> CatalogNameForDevice(std::string_view device);

// The built-in GPUs plus any the user adds with --hardware-file.
class HardwareCatalog {
 public:
  // Loads every models/hardware/*.json under DataDir().
  static Result<HardwareCatalog> LoadBuiltin();
  // The built-in GPUs plus those of the user's files (--hardware-file).
  static Result<HardwareCatalog> Load(const std::vector<std::string>& extra_files);
  Status AddFile(const std::string& path);

  // Looks up a GPU by name; the error lists the known names.
  Result<Hardware> Find(const std::string& name) const;
  std::vector<const Hardware*> All() const;

 private:
  std::map<std::string, Hardware> by_name_;
};

}  // namespace fathom::models
