#include "models/deployment.h"

#include <catch2/catch.hpp>

namespace fathom::models {
namespace {

// The deployment a request resolves to, required to resolve.
Deployment Resolved(const DeploymentRequest& request) {
  auto d = ResolveDeployment(request);
  INFO(d.status().message());
  REQUIRE(d.ok());
  return std::move(d).value();
}

// A request for `model` with nothing else given.
DeploymentRequest ForModel(const std::string& model) {
  DeploymentRequest r;
  r.model = model;
  return r;
}

std::string ErrorOf(const DeploymentRequest& request) {
  auto d = ResolveDeployment(request);
  REQUIRE_FALSE(d.ok());
  return d.status().message();
}

}  // namespace

TEST_CASE("ResolveDeployment: no flags give the built-in default deployment", "[models]") {
  const Deployment d = Resolved({});
  CHECK(d.model.name == LoadModel(std::string(kDefaultModel))->name);
  CHECK(d.hardware.name == kDefaultHardware);
  CHECK(d.layout.ToString() == "TP8 PP1 EP8 attnDP8 x1");
  CHECK(d.precision.moe_weights == DType::kNvfp4);
  CHECK(d.precision.dense_weights == DType::kNvfp4);
  CHECK(d.precision.kv == DType::kFp8);

  // Flags given replace the default's; the others keep it.
  DeploymentRequest r;
  r.tp = 8;
  r.pp = 2;
  r.kv = "bf16";
  r.dense_weights = "fp8";
  const Deployment two = Resolved(r);
  CHECK(two.layout.ToString() == "TP8 PP2 EP8 attnDP8 x1");  // gpus = tp x pp
  CHECK(two.precision.moe_weights == DType::kNvfp4);
  CHECK(two.precision.dense_weights == DType::kFp8);
  CHECK(two.precision.kv == DType::kBf16);
}

TEST_CASE("ResolveDeployment: a model given takes tp from gpus / pp, its own weights, bf16 KV",
          "[models]") {
  DeploymentRequest r;
  r.model = "llama2-70b";
  r.gpus = 8;
  r.pp = 2;
  r.hardware = "h100-sxm";
  const Deployment d = Resolved(r);
  CHECK(d.hardware.name == "h100-sxm");
  CHECK(d.layout.ToString() == "TP4 PP2 EP1 attnDP1 x1");
  CHECK(d.precision.moe_weights == d.model.native_moe_weights);
  CHECK(d.precision.dense_weights == d.model.native_dense_weights);
  CHECK(d.precision.kv == DType::kBf16);

  DeploymentRequest tp_only;
  tp_only.model = "llama2-70b";
  tp_only.tp = 2;
  CHECK(Resolved(tp_only).layout.ToString() == "TP2 PP1 EP1 attnDP1 x1");
  CHECK(Resolved(ForModel("llama2-70b")).layout.ToString() == "TP1 PP1 EP1 attnDP1 x1");
  CHECK(Resolved(ForModel("llama2-70b")).hardware.name == kDefaultHardware);
}

TEST_CASE("ResolveDeployment: errors name the flag, or the model and the degree", "[models]") {
  DeploymentRequest weights;
  weights.weights = "fp7";
  CHECK(ErrorOf(weights).find("--weights") != std::string::npos);
  DeploymentRequest kv;
  kv.kv = "int3";
  CHECK(ErrorOf(kv).find("--kv") != std::string::npos);
  DeploymentRequest r;
  r.model = "llama2-70b";
  r.tp = 3;
  const std::string bad_tp = ErrorOf(r);
  CHECK(bad_tp.find(Resolved(ForModel("llama2-70b")).model.name + ": ") == 0);
  CHECK(bad_tp.find("must divide num_attention_heads (64)") != std::string::npos);
  DeploymentRequest gpu;
  gpu.hardware = "no-such-gpu";
  CHECK(ErrorOf(gpu).find("no-such-gpu") != std::string::npos);
  DeploymentRequest file;
  file.hardware_files = {"/nonexistent/gpu.json"};
  CHECK(ErrorOf(file).find("/nonexistent/gpu.json") != std::string::npos);
}

}  // namespace fathom::models
