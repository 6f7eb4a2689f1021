#include <algorithm>
#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "models/hardware.h"

namespace fathom::cli {
namespace {

struct HardwareFlags {
  std::string name;
  std::vector<std::string> files;
  bool json = false;
};

OrderedJson ToJson(const models::Hardware& hw) {
  OrderedJson j;
  j["name"] = hw.name;
  j["description"] = hw.description;
  j["memory_bytes"] = hw.memory_bytes;
  j["hbm_bytes_per_s"] = hw.hbm_bytes_per_s;
  j["peak_bf16_flops"] = hw.peak_bf16_flops;
  j["peak_fp8_flops"] = hw.peak_fp8_flops;
  j["peak_fp4_flops"] = hw.peak_fp4_flops;
  j["scale_up_bytes_per_s"] = hw.scale_up_bytes_per_s;
  j["scale_up_domain_gpus"] = hw.scale_up_domain_gpus;
  j["scale_out_bytes_per_s"] = hw.scale_out_bytes_per_s;
  j["sms"] = hw.sms;
  j["power_watts"] = hw.power_watts;
  j["price_per_gpu_hour_usd"] = hw.price_per_gpu_hour_usd;
  return j;
}

std::string Peak(double flops) { return flops > 0 ? StrFormat("%7.0f", flops / 1e12) : "      -"; }

Status List(const HardwareFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog, models::HardwareCatalog::Load(f.files));
  if (f.json) {
    OrderedJson all = OrderedJson::array();
    for (const auto* hw : catalog.All()) all.push_back(ToJson(*hw));
    std::printf("%s\n", all.dump(2).c_str());
    return Status::Ok();
  }
  int width = 10;  // the longest name
  for (const auto* hw : catalog.All()) width = std::max(width, static_cast<int>(hw->name.size()));
  std::printf("%-*s %8s %8s %7s %7s %7s %9s %6s %6s %7s\n", width, "name", "HBM GB", "HBM TB/s",
              "BF16 TF", "FP8 TF", "FP4 TF", "link GB/s", "domain", "W", "$/GPU-h");
  for (const auto* hw : catalog.All()) {
    std::printf("%-*s %8.0f %8.2f %s %s %s %9.0f %6d %6.0f %7.2f\n", width, hw->name.c_str(),
                hw->memory_bytes / 1e9, hw->hbm_bytes_per_s / 1e12,
                Peak(hw->peak_bf16_flops).c_str(), Peak(hw->peak_fp8_flops).c_str(),
                Peak(hw->peak_fp4_flops).c_str(), hw->scale_up_bytes_per_s / 1e9,
                hw->scale_up_domain_gpus, hw->power_watts, hw->price_per_gpu_hour_usd);
  }
  return Status::Ok();
}

Status Show(const HardwareFlags& f) {
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog, models::HardwareCatalog::Load(f.files));
  FATHOM_ASSIGN_OR_RETURN(models::Hardware hw, catalog.Find(f.name));
  std::printf("%s\n", ToJson(hw).dump(2).c_str());
  return Status::Ok();
}

}  // namespace

void RegisterHardware(CLI::App& app, Status* result) {
  auto flags = std::make_shared<HardwareFlags>();
  CLI::App* cmd = app.add_subcommand("hardware", "List or show the GPU catalogue");
  cmd->require_subcommand(1);
  cmd->add_option("--hardware-file", flags->files, "Add a GPU from your own JSON file");
  CLI::App* list = cmd->add_subcommand("list", "One line per GPU");
  list->add_flag("--json", flags->json, "Print JSON");
  list->callback([flags, result] { *result = List(*flags); });
  CLI::App* show = cmd->add_subcommand("show", "Every figure of one GPU, as JSON");
  show->add_option("name", flags->name, "GPU name")->required();
  show->callback([flags, result] { *result = Show(*flags); });
}

}  // namespace fathom::cli
