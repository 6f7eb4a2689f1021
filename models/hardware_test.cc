#include "models/hardware.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "base/files.h"

namespace fathom::models {

TEST_CASE("HardwareCatalog: ships the ten GPUs of the reference with their datasheet figures",
          "[models]") {
  auto catalog = HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  for (const char* name : {"h100-sxm", "h200", "h200-nvl", "b200", "b300", "gb200", "gb300",
                           "mi300x", "mi325x", "mi355x"}) {
    INFO(name);
    CHECK(catalog->Find(name).ok());
  }
  auto b200 = catalog->Find("b200");
  CHECK(b200->memory_bytes == Approx(180e9));
  CHECK(b200->hbm_bytes_per_s == Approx(8e12));
  CHECK(b200->PeakFlops(DType::kNvfp4) == Approx(9e15));
  CHECK(b200->PeakFlops(DType::kFp8) == Approx(4.5e15));
  CHECK(b200->scale_up_domain_gpus == 8);
  auto h100 = catalog->Find("h100-sxm");
  // No FP4 tensor cores on Hopper: FP4 weights run at the FP8 peak.
  CHECK(h100->PeakFlops(DType::kNvfp4) == Approx(1979e12));
  CHECK(catalog->Find("gb200")->scale_up_domain_gpus == 72);
}

TEST_CASE("HardwareCatalog: an unknown GPU lists the known ones", "[models]") {
  auto catalog = HardwareCatalog::LoadBuiltin();
  auto r = catalog->Find("tpu-v9");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("b200") != std::string::npos);
}

TEST_CASE("LoadHardwareFile: a missing, empty or out-of-range field names the file and the rule",
          "[models]") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "fathom_gpu.json").string();
  REQUIRE(WriteFileAtomic(path, R"({"name": "x", "memory_gb": 80, "hbm_bandwidth_tb_per_s": 0,
    "dense_tflops": {"bf16": 100}, "scale_up_gb_per_s": 100, "scale_up_domain_gpus": 8,
    "scale_out_gbit_per_s": 400})")
              .ok());
  auto r = LoadHardwareFile(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        path + ": field 'hbm_bandwidth_tb_per_s' = 0: must be in [0.01, 1000]");
  REQUIRE(WriteFileAtomic(path, R"({"name": "x"})").ok());
  r = LoadHardwareFile(path);
  CHECK(r.status().message() == path + ": field 'memory_gb': missing (required number)");
  // Absurd values are unit slips, said as typed; NaN breaks every range.
  const std::string good =
      R"("dense_tflops": {"bf16": 100}, "scale_up_gb_per_s": 100, "scale_up_domain_gpus": 8,
    "scale_out_gbit_per_s": 400)";
  REQUIRE(
      WriteFileAtomic(
          path, R"({"name": "x", "memory_gb": 1e300, "hbm_bandwidth_tb_per_s": 3, )" + good + "}")
          .ok());
  CHECK(LoadHardwareFile(path).status().message() ==
        path + ": field 'memory_gb' = 1e+300: must be in [1, 100000]");
  REQUIRE(
      WriteFileAtomic(
          path,
          R"({"name": "x", "memory_gb": 80, "hbm_bandwidth_tb_per_s": 3, "price_per_gpu_hour_usd": -1, )" +
              good + "}")
          .ok());
  CHECK(LoadHardwareFile(path).status().message() ==
        path + ": field 'price_per_gpu_hour_usd' = -1: must be in [0, 10000]");
  REQUIRE(WriteFileAtomic(
              path, R"({"name": "x", "memory_gb": 80, "hbm_bandwidth_tb_per_s": 3, "sms": 0, )" +
                        good + "}")
              .ok());
  CHECK(LoadHardwareFile(path).status().message() ==
        path + ": field 'sms' = 0: must be in [1, 100000]");
  REQUIRE(WriteFileAtomic(
              path, R"({"name": "", "memory_gb": 80, "hbm_bandwidth_tb_per_s": 3, )" + good + "}")
              .ok());
  CHECK(LoadHardwareFile(path).status().message() ==
        path + ": field 'name' = \"\": must not be empty");
  std::filesystem::remove(path);
}

TEST_CASE("CatalogNameForDevice: CUDA's GPU names to catalogue names, the most specific first",
          "[models]") {
  CHECK(*CatalogNameForDevice("NVIDIA H100 80GB HBM3") == "h100-sxm");
  CHECK(*CatalogNameForDevice("NVIDIA H200") == "h200");
  CHECK(*CatalogNameForDevice("NVIDIA H200 NVL") == "h200-nvl");
  CHECK(*CatalogNameForDevice("NVIDIA B200") == "b200");
  CHECK(*CatalogNameForDevice("NVIDIA GB200") == "gb200");
  CHECK(*CatalogNameForDevice("AMD Instinct MI300X") == "mi300x");
  CHECK(*CatalogNameForDevice("NVIDIA GH200 480GB") == "gh200");  // not an H200
  CHECK(*CatalogNameForDevice("NVIDIA GH200 144G HBM3e") == "gh200-144gb");
  CHECK(*CatalogNameForDevice("NVIDIA H100 NVL") == "h100-nvl");
  CHECK(*CatalogNameForDevice("NVIDIA A100-SXM4-80GB") == "a100-sxm-80gb");
  CHECK(*CatalogNameForDevice("NVIDIA A100-SXM4-40GB") == "a100-sxm-40gb");
  CHECK(*CatalogNameForDevice("NVIDIA L40S") == "l40s");
  CHECK(*CatalogNameForDevice("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "rtx-pro-6000");
  CHECK_FALSE(CatalogNameForDevice("NVIDIA A100 80GB PCIe").ok());  // another card (300 W)
  // Every name it gives is in the catalogue.
  const auto catalog = *HardwareCatalog::LoadBuiltin();
  for (const char* device :
       {"H100 SXM", "H200", "H200 NVL", "B200", "B300", "GB200", "GB300", "MI300X", "MI325X",
        "MI355X", "GH200 480GB", "GH200 144G HBM3e", "H100 NVL", "A100-SXM4-80GB", "A100-SXM4-40GB",
        "L40S", "RTX PRO 6000 Blackwell Server Edition"}) {
    INFO(device);
    CHECK(catalog.Find(*CatalogNameForDevice(device)).ok());
  }
  auto pcie = CatalogNameForDevice("NVIDIA H100 PCIe");
  REQUIRE_FALSE(pcie.ok());
  CHECK(pcie.status().message() == "GPU 'NVIDIA H100 PCIe': not in the built-in catalogue");
}

}  // namespace fathom::models
