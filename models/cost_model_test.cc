#include "models/cost_model.h"

#include <sqlite3.h>

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/files.h"
#include "base/random.h"
#include "models/fit.h"
#include "models/hardware.h"
#include "models/perf_db.h"
#include "models/roofline.h"

namespace fathom::models {
namespace {

struct Setup {
  ModelArch model = *LoadModel("deepseek-r1");
  Hardware hw = *(*HardwareCatalog::LoadBuiltin()).Find("b200");
  ParallelLayout layout{8, 8, 1, 8, 8};
  Precision precision{DType::kNvfp4, DType::kNvfp4, DType::kFp8};
};

BatchShape Decode(int seqs, int64_t context) {
  BatchShape b;
  for (int i = 0; i < seqs; ++i) b.Add({1, context, true, true}, 0);
  return b;
}

}  // namespace

TEST_CASE("CalibratedModel: no operator beats its physical minimum", "[models]") {
  Setup s;
  CalibratedModel model(s.model, s.hw, s.layout, s.precision, CostParams{});
  std::vector<Operator> ops;
  for (int seqs : {1, 16, 256}) {
    BatchShape b = Decode(seqs, 3000);
    b.Add({2048, 0, false, true}, 0);
    model.builder().Build(b, MoeInput{b.tokens * 8}, 0, &ops);
    for (const Operator& op : ops) {
      INFO(op.name);
      const double t = model.OpSeconds(op);
      if (op.kind == OpKind::kCommunication) {
        CHECK(t >= op.comm_bytes / s.hw.scale_up_bytes_per_s - 1e-12);
        continue;
      }
      const double peak = op.kind == OpKind::kGemm || op.kind == OpKind::kGroupedGemm
                              ? s.hw.PeakFlops(op.dtype)
                              : s.hw.PeakFlops(DType::kFp8);
      CHECK(t >= op.flops / peak);
      CHECK(t >= op.bytes / s.hw.hbm_bytes_per_s);
    }
  }
}

TEST_CASE("CalibratedModel: iteration time grows with batch and with context", "[models]") {
  Setup s;
  CalibratedModel model(s.model, s.hw, s.layout, s.precision, CostParams{});
  double last = 0;
  for (int seqs : {1, 4, 16, 64, 256}) {
    std::vector<BatchShape> ranks(8, Decode(seqs, 2000));
    const double t = ToSeconds(model.StageTime(ranks, 0));
    CHECK(t > last);
    last = t;
  }
  last = 0;
  for (int64_t ctx : {100, 1000, 10000, 100000}) {
    std::vector<BatchShape> ranks(8, Decode(32, ctx));
    const double t = ToSeconds(model.StageTime(ranks, 0));
    CHECK(t > last);
    last = t;
  }
  // Slower than the roofline, which is the physical bound.
  RooflineModel roofline(s.model, s.hw, s.layout, s.precision);
  std::vector<BatchShape> ranks(8, Decode(64, 4000));
  CHECK(model.StageTime(ranks, 0) > roofline.StageTime(ranks, 0));
}

TEST_CASE("CalibratedModel: timing only undominated ranks gives the slowest rank's time",
          "[models]") {
  Setup s;
  CalibratedModel fast(s.model, s.hw, s.layout, s.precision, CostParams{});
  CalibratedModel every(s.model, s.hw, s.layout, s.precision, CostParams{});
  every.set_monotone(false);
  Rng rng(3);
  int skipped_some = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BatchShape> ranks(8);
    for (BatchShape& r : ranks) {
      const int decodes = static_cast<int>(rng.Uniform() * 64);
      for (int i = 0; i < decodes; ++i)
        r.Add({1, 1 + static_cast<int64_t>(rng.Uniform() * 8000), true, true}, 0);
      if (rng.Uniform() < 0.3)
        r.Add({1 + static_cast<int64_t>(rng.Uniform() * 2048), 0, false, true}, 0);
    }
    if (trial % 4 == 0) ranks[1] = ranks[0];  // equal shapes
    CHECK(fast.StageTime(ranks, 0) == every.StageTime(ranks, 0));
    for (size_t i = 1; i < ranks.size(); ++i) skipped_some += NoMoreWork(ranks[i], ranks[0]);
  }
  CHECK(skipped_some > 0);
}

TEST_CASE("CalibratedModel: cached parts give the slowest rank's whole operator list", "[models]") {
  // The stage time caches the routed experts by group tokens and a decode-only rank's other
  // operators by its token count; pricing every rank's full list must agree.
  const Hardware hw = *(*HardwareCatalog::LoadBuiltin()).Find("b200");
  struct Case {
    const char* model;
    ParallelLayout layout;
  };
  for (const Case& c :
       {Case{"deepseek-r1", {8, 8, 1, 8, 8}}, Case{"deepseek-r1", {8, 4, 2, 4, 2}},
        Case{"gpt-oss-120b", {4, 4, 1, 4, 1}}, Case{"llama2-70b", {8, 4, 2, 1, 1}}}) {
    const ModelArch model = *LoadModel(c.model);
    CostParams params;
    params.iteration_overhead_us = 0;
    params.per_sequence_overhead_us = 0;
    params.eager_launch_us = 0;
    const Precision precision{DType::kFp8, DType::kFp8, DType::kFp8};
    CalibratedModel cached(model, hw, c.layout, precision, params);
    CalibratedModel reference(model, hw, c.layout, precision, params);
    Rng rng(11);
    std::vector<Operator> ops;
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<BatchShape> ranks(c.layout.attn_dp);
      for (BatchShape& r : ranks) {
        const int decodes = static_cast<int>(rng.Uniform() * 8);  // few distinct counts: cache hits
        const int64_t tokens = rng.Uniform() < 0.2 ? 2 : 1;       // MTP drafts in some trials
        for (int i = 0; i < decodes; ++i) {
          r.Add({tokens, 1 + static_cast<int64_t>(rng.Uniform() * 9000), true, true},
                model.sliding_window);
        }
        if (rng.Uniform() < 0.3) {
          const int64_t cached_tokens = rng.Uniform() < 0.5 ? 0 : 512;
          r.Add({1 + static_cast<int64_t>(rng.Uniform() * 2048), cached_tokens, false,
                 rng.Uniform() < 0.5},
                model.sliding_window);
        }
      }
      int64_t group = 0;
      for (const BatchShape& r : ranks) group += r.tokens;
      for (int stage = 0; stage < c.layout.pp; ++stage) {
        double slowest = 0;
        for (const BatchShape& r : ranks) {
          reference.builder().Build(r, MoeInput{group}, stage, &ops);
          double t = 0;
          for (const Operator& op : ops)
            t += reference.OpSeconds(op) * static_cast<double>(op.count);
          slowest = std::max(slowest, t);
        }
        const SimTime got = cached.StageTime(ranks, stage);
        INFO(c.model << " " << c.layout.ToString() << " trial " << trial << " stage " << stage);
        CHECK(std::abs(got.count() - FromSeconds(slowest).count()) <= 1);
      }
    }
  }
}

TEST_CASE("CalibratedModel: a stage's time broken down adds up to it", "[models]") {
  const Hardware hw = *(*HardwareCatalog::LoadBuiltin()).Find("b200");
  struct Case {
    const char* model;
    ParallelLayout layout;
    Runtime runtime;
  };
  for (const Case& c : {Case{"deepseek-r1", {8, 8, 1, 8, 8}, Runtime::kPython},
                        Case{"deepseek-r1", {8, 4, 2, 4, 2}, Runtime::kPython},
                        Case{"llama2-70b", {8, 4, 2, 1, 1}, Runtime::kCpp}}) {
    const ModelArch model = *LoadModel(c.model);
    CostParams params;
    params.cpp_launch_us = 40;  // launches that outlast a small batch's GPU time
    const Precision precision{DType::kFp8, DType::kFp8, DType::kFp8};
    const CalibratedModel cm(model, hw, c.layout, precision, params, c.runtime);
    Rng rng(5);
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<BatchShape> ranks(c.layout.attn_dp);
      for (BatchShape& r : ranks) {
        const int decodes = static_cast<int>(rng.Uniform() * 64);
        for (int i = 0; i < decodes; ++i)
          r.Add({1, 1 + static_cast<int64_t>(rng.Uniform() * 9000), true, true}, 0);
        if (rng.Uniform() < 0.3) r.Add({1 + static_cast<int64_t>(rng.Uniform() * 2048), 0}, 0);
      }
      if (trial % 2 == 0) PadToCudaGraph(ranks, {1, 2, 4, 8, 16, 32, 64}, 1);
      for (int stage = 0; stage < c.layout.pp; ++stage) {
        INFO(c.model << " " << c.layout.ToString() << " trial " << trial << " stage " << stage);
        const StageCost cost = cm.StageCostOf(ranks, stage);
        CHECK(cost.Total() == Approx(ToSeconds(cm.StageTime(ranks, stage))).margin(2e-9));
        CHECK(cost.imbalance >= 0);
        CHECK(cost.unattributed == 0);
        if (std::string(c.model) == "deepseek-r1" && cost.Total() > 0) CHECK(cost.grouped_gemm > 0);
      }
    }
  }
  // Equal ranks wait for none of them; an idle rank waits for the busy one's whole time.
  const Setup s;
  const CalibratedModel cm(s.model, s.hw, s.layout, s.precision, CostParams{});
  std::vector<BatchShape> even(8, Decode(32, 2000));
  CHECK(cm.StageCostOf(even, 0).imbalance == Approx(0).margin(1e-12));
  std::vector<BatchShape> one_busy(8);
  one_busy[0] = Decode(32, 2000);
  const StageCost lopsided = cm.StageCostOf(one_busy, 0);
  CHECK(lopsided.imbalance > 0);
  CHECK(lopsided.attention * 8 == Approx(cm.StageCostOf(even, 0).attention));
}

TEST_CASE("CalibratedModel: host time comes once per iteration, on the first pipeline stage",
          "[models]") {
  const Hardware hw = *(*HardwareCatalog::LoadBuiltin()).Find("h200");
  const ModelArch model = *LoadModel("llama2-70b");
  const ParallelLayout layout{4, 2, 2, 1, 1};
  const Precision precision{DType::kFp8, DType::kFp8, DType::kFp8};
  CostParams quiet;
  quiet.iteration_overhead_us = quiet.cpp_iteration_overhead_us = 0;
  quiet.per_sequence_overhead_us = quiet.cpp_per_sequence_overhead_us = 0;
  quiet.eager_launch_us = quiet.cpp_launch_us = 0;
  CostParams host = quiet;
  host.iteration_overhead_us = 3000;
  host.per_sequence_overhead_us = 40;
  host.cpp_iteration_overhead_us = 500;
  host.cpp_per_sequence_overhead_us = 4;
  const CalibratedModel without(model, hw, layout, precision, quiet);
  const CalibratedModel with(model, hw, layout, precision, host);
  const CalibratedModel cpp(model, hw, layout, precision, host, Runtime::kCpp);
  BatchShape shape;
  for (int i = 0; i < 25; ++i) shape.Add({1, 1000, true, true}, model.sliding_window);
  const std::vector<BatchShape> ranks = {shape};
  const double extra0 = ToSeconds(with.StageTime(ranks, 0) - without.StageTime(ranks, 0));
  CHECK(extra0 == Approx((3000 + 40 * 25) * 1e-6).epsilon(1e-6));
  CHECK(with.StageTime(ranks, 1) == without.StageTime(ranks, 1));
  // A C++ runtime pays its own host costs.
  CHECK(ToSeconds(cpp.StageTime(ranks, 0) - without.StageTime(ranks, 0)) ==
        Approx((500 + 4 * 25) * 1e-6).epsilon(1e-6));

  // An eager iteration pays every kernel's launch on each stage, a graph replay none. The C++
  // runtime's engines launch theirs on every iteration, ahead of the GPU, which runs meanwhile: a
  // stage takes the longer of the two, the launches when they are slow (50 us each), the
  // operators when they are quick.
  for (double launch_us : {50.0, 0.5}) {
    CostParams launching = quiet;
    launching.eager_launch_us = launching.cpp_launch_us = launch_us;
    const CalibratedModel python_eager(model, hw, layout, precision, launching);
    const CalibratedModel cpp_engine(model, hw, layout, precision, launching, Runtime::kCpp);
    std::vector<BatchShape> replayed = ranks;
    replayed[0].cuda_graph = true;
    for (int stage : {0, 1}) {
      INFO(launch_us << " us a launch, stage " << stage);
      const double operators = ToSeconds(without.StageTime(ranks, stage));
      const double launches = static_cast<double>(python_eager.Launches(stage)) * launch_us * 1e-6;
      CHECK((launch_us > 1 ? launches > 2 * operators : launches < operators / 2));
      CHECK(ToSeconds(python_eager.StageTime(ranks, stage)) ==
            Approx(operators + launches).epsilon(1e-6));
      CHECK(python_eager.StageTime(replayed, stage) == without.StageTime(replayed, stage));
      CHECK(ToSeconds(cpp_engine.StageTime(ranks, stage)) ==
            Approx(std::max(operators, launches)).epsilon(1e-6));
      CHECK(cpp_engine.StageTime(replayed, stage) == cpp_engine.StageTime(ranks, stage));
    }
  }
  const CalibratedModel python_eager(model, hw, layout, precision, quiet);
  // Llama 2 70B's 80 layers on two stages: a norm, four attention GEMMs, attention, a norm, two
  // MLP GEMMs and the activation, two all-reduces each, and the embedding and head at the ends.
  CHECK(python_eager.Launches(0) + python_eager.Launches(1) > 80 * 10);
}

TEST_CASE(
    "CalibratedModel: vLLM's host mechanisms: launches ahead, multi-step shares, async "
    "scheduling",
    "[models]") {
  const Hardware hw = *(*HardwareCatalog::LoadBuiltin()).Find("mi300x");
  const ModelArch model = *LoadModel("llama2-70b");
  const ParallelLayout layout{1, 1, 1, 1, 1};
  const Precision precision{DType::kFp8, DType::kFp8, DType::kFp8};
  CostParams quiet;
  quiet.iteration_overhead_us = quiet.per_sequence_overhead_us = quiet.eager_launch_us = 0;
  BatchShape shape;
  for (int i = 0; i < 64; ++i) shape.Add({1, 1000, true, true}, model.sliding_window);
  const std::vector<BatchShape> ranks = {shape};
  const double gpu =
      ToSeconds(CalibratedModel(model, hw, layout, precision, quiet).StageTime(ranks, 0));
  for (double launch_us : {50.0, 0.5}) {
    INFO(launch_us << " us a launch");
    CostParams p = quiet;
    p.eager_launch_us = launch_us;
    p.eager_launches_ahead = true;
    const CalibratedModel ahead(model, hw, layout, precision, p);
    const double launches = static_cast<double>(ahead.Launches(0)) * launch_us * 1e-6;
    // Enqueued ahead, as the C++ runtime's: the longer of the kernels and their launches.
    CHECK(ToSeconds(ahead.StageTime(ranks, 0)) == Approx(std::max(gpu, launches)).epsilon(1e-6));
    std::vector<BatchShape> replayed = ranks;
    replayed[0].cuda_graph = true;
    CHECK(ahead.StageTime(replayed, 0) ==
          CalibratedModel(model, hw, layout, precision, quiet).StageTime(replayed, 0));
  }
  // Host work: all of it per iteration, a multi-step run's share, or beside the GPU (async).
  for (double host_us : {2000.0, 200000.0}) {
    INFO(host_us << " us of host work");
    CostParams p = quiet;
    p.iteration_overhead_us = host_us;
    const CalibratedModel m(model, hw, layout, precision, p);
    std::vector<BatchShape> shared = ranks, beside = ranks;
    shared[0].host_share = 0.25;
    beside[0].host_ahead = true;
    CHECK(ToSeconds(m.StageTime(ranks, 0)) == Approx(gpu + host_us * 1e-6).epsilon(1e-6));
    CHECK(ToSeconds(m.StageTime(shared, 0)) == Approx(gpu + host_us * 0.25e-6).epsilon(1e-6));
    CHECK(ToSeconds(m.StageTime(beside, 0)) == Approx(std::max(gpu, host_us * 1e-6)).epsilon(1e-6));
    // The breakdown adds up to the same, the host part what the GPU waits for.
    const StageCost c = m.StageCostOf(beside, 0);
    CHECK(c.Total() == Approx(ToSeconds(m.StageTime(beside, 0))).epsilon(1e-6));
    CHECK(c.host == Approx(std::max(0.0, host_us * 1e-6 - gpu)).margin(1e-9));
  }
}

TEST_CASE("OperatorSeconds: FP4 and FP8 GEMMs run at their tensor cores' own fraction of peak",
          "[models]") {
  auto catalog = HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  const Hardware b200 = *catalog->Find("b200"), h200 = *catalog->Find("h200");
  REQUIRE(b200.peak_fp4_flops > 0);
  REQUIRE(h200.peak_fp4_flops == 0);
  CostParams p;
  p.gemm_efficiency = 0.8;
  p.fp4_gemm_efficiency = 0.4;
  p.fp8_gemm_efficiency = 0.6;
  p.kernel_floor_us = 0;
  p.gemm_stream_share = 0;  // no small-M loss: the math alone
  // Compute-bound: 8192 rows of an 8192 x 8192 weight.
  Operator gemm = Gemm("g", 1, 8192, 8192, 8192, DType::kFp8);
  gemm.dtype = DType::kNvfp4;
  CHECK(OperatorSeconds(gemm, b200, p, 1) == Approx(gemm.flops / (9000e12 * 0.4)));
  // A GPU without FP4 tensor cores runs it on its FP8 ones.
  CHECK(OperatorSeconds(gemm, h200, p, 1) == Approx(gemm.flops / (h200.peak_fp8_flops * 0.6)));
  // MXFP4 weights (gpt-oss) meet MXFP8 activations on Blackwell and BF16 ones on Hopper.
  gemm.dtype = DType::kMxfp4;
  CHECK(OperatorSeconds(gemm, b200, p, 1) == Approx(gemm.flops / (4500e12 * 0.6)));
  CHECK(OperatorSeconds(gemm, h200, p, 1) == Approx(gemm.flops / (h200.peak_bf16_flops * 0.8)));
  gemm.dtype = DType::kFp8;
  CHECK(OperatorSeconds(gemm, b200, p, 1) == Approx(gemm.flops / (4500e12 * 0.6)));
  gemm.dtype = DType::kBf16;
  CHECK(OperatorSeconds(gemm, b200, p, 1) == Approx(gemm.flops / (b200.peak_bf16_flops * 0.8)));
}

TEST_CASE("OperatorSeconds: the small-M loss is weight streaming, carried by bandwidth and bytes",
          "[models]") {
  auto catalog = HardwareCatalog::LoadBuiltin();
  REQUIRE(catalog.ok());
  const Hardware h100 = *catalog->Find("h100-sxm"), h200 = *catalog->Find("h200");
  REQUIRE(h100.peak_fp8_flops == h200.peak_fp8_flops);
  CostParams p;
  p.kernel_floor_us = 0;
  p.gemm_stream_share = 0.7;
  // 256 rows of Llama 2 70B's gate and up projections: compute-bound, plus the loss.
  auto loss = [&](const Hardware& hw, DType t) {
    const Operator gemm = Gemm("g", 1, 256, 57344, 8192, t);
    return OperatorSeconds(gemm, hw, p, 1) -
           gemm.flops / (hw.PeakFlops(t) * (p.*GemmEfficiencyField(hw, t)));
  };
  const double weights_s = 57344.0 * 8192 * 2 / (h100.hbm_bytes_per_s * p.memory_efficiency);
  CHECK(loss(h100, DType::kBf16) == Approx(0.7 * weights_s));
  // The same FP8 peak with 1.43x the bandwidth (H200): the loss shrinks with the bandwidth, and
  // FP8 weights stream in about half the BF16 time.
  CHECK(loss(h200, DType::kFp8) / loss(h100, DType::kFp8) ==
        Approx(h100.hbm_bytes_per_s / h200.hbm_bytes_per_s));
  CHECK(loss(h100, DType::kFp8) / loss(h100, DType::kBf16) ==
        Approx(BytesPerElement(DType::kFp8) / 2));
  // A grouped GEMM streams the weights of the experts its tokens reach, at its own rate.
  p.grouped_memory_efficiency = 0.6;
  const Operator grouped = GroupedGemm("e", 1, 8192, 4096, 7168, 256, 40, DType::kFp8);
  CHECK(OperatorSeconds(grouped, h200, p, 1) ==  // one GPU (ep 1): no spread of the routing
        Approx(grouped.flops / (h200.peak_fp8_flops * p.fp8_gemm_efficiency) +
               0.7 * 40 * 4096 * 7168 * BytesPerElement(DType::kFp8) /
                   (h200.hbm_bytes_per_s * p.grouped_memory_efficiency)));
  // A decode step's few tokens: the whole traffic at that rate; dense GEMMs keep theirs.
  const Operator thin = GroupedGemm("e", 1, 16, 4096, 7168, 256, 16, DType::kFp8);
  CHECK(OperatorSeconds(thin, h200, p, 1) ==
        Approx(thin.bytes / (h200.hbm_bytes_per_s * 0.6) + p.kernel_floor_us * 1e-6));
  const Operator dense = Gemm("d", 1, 16, 4096, 7168, DType::kFp8);
  CHECK(OperatorSeconds(dense, h200, p, 1) ==
        Approx(dense.bytes / (h200.hbm_bytes_per_s * p.memory_efficiency)));
  // An engine whose FP8 expert kernels stream slower (fp8_grouped_memory_efficiency) prices FP8
  // experts at that rate, and only those.
  p.fp8_grouped_memory_efficiency = 0.4;
  CHECK(OperatorSeconds(thin, h200, p, 1) ==
        Approx(thin.bytes / (h200.hbm_bytes_per_s * 0.4) + p.kernel_floor_us * 1e-6));
  const Operator thin_bf16 = GroupedGemm("e", 1, 16, 4096, 7168, 256, 16, DType::kBf16);
  CHECK(OperatorSeconds(thin_bf16, h200, p, 1) ==
        Approx(thin_bf16.bytes / (h200.hbm_bytes_per_s * 0.6) + p.kernel_floor_us * 1e-6));
  CHECK(OperatorSeconds(dense, h200, p, 1) ==
        Approx(dense.bytes / (h200.hbm_bytes_per_s * p.memory_efficiency)));
}

TEST_CASE("PerfDb: measurements round-trip through SQLite", "[models]") {
  auto db = PerfDb::Open(":memory:");
  REQUIRE(db.ok());
  OpMeasurement m;
  m.hardware = "h100-sxm";
  m.stack = "cublaslt-13.0";
  m.op = "gemm";
  m.dtype = "fp8";
  m.m = 128;
  m.n = 7168;
  m.k = 2048;
  m.median_us = 21.5;
  m.p10_us = 21.0;
  m.p90_us = 22.4;
  m.count = 50;
  m.date = "2026-11-22";
  m.device_info = "NVIDIA H100 80GB HBM3";
  REQUIRE(db->Insert(m).ok());
  m.m = 256;
  m.median_us = 30.0;
  REQUIRE(db->Insert(m).ok());
  auto rows = db->Query("h100-sxm", "gemm", "fp8");
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 2);
  CHECK((*rows)[0].m == 128);
  CHECK((*rows)[0].median_us == 21.5);
  CHECK((*rows)[0].p90_us == 22.4);
  CHECK((*rows)[0].stack == "cublaslt-13.0");
  CHECK((*rows)[1].median_us == 30.0);
  CHECK(db->Query("h100-sxm", "gemm", "bf16")->empty());
  m.source = "guessed";
  CHECK(db->Insert(m).message().find("source = \"guessed\"") != std::string::npos);

  std::vector<KernelRecord> kernels(2);
  kernels[0].name = "sm90_xmma_gemm";
  kernels[0].start_ns = 100;
  kernels[0].end_ns = 250;
  kernels[0].nvtx_range = "layer.0";
  kernels[1].name = "flash_fwd";
  kernels[1].start_ns = 300;
  kernels[1].end_ns = 400;
  REQUIRE(db->InsertKernels(kernels).ok());
  auto back = db->Kernels();
  REQUIRE(back->size() == 2);
  CHECK((*back)[0].name == "sm90_xmma_gemm");
  CHECK((*back)[0].nvtx_range == "layer.0");
  CHECK((*back)[1].end_ns == 400);
}

TEST_CASE("PerfDb: attention rows keep their dims; an older database gains the column",
          "[models]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_perf_db_dims_test.db").string();
  std::remove(path.c_str());
  {
    // A database written before the dims column existed.
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
    REQUIRE(
        sqlite3_exec(
            raw,
            "CREATE TABLE op_latency(id INTEGER PRIMARY KEY, hardware TEXT NOT NULL, stack TEXT "
            "NOT NULL, "
            "op TEXT NOT NULL, dtype TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL, k "
            "INTEGER NOT "
            "NULL, extra INTEGER NOT NULL, median_us REAL NOT NULL, p10_us REAL, p90_us REAL, "
            "count "
            "INTEGER, source TEXT NOT NULL, date TEXT, device_info TEXT);"
            "INSERT INTO op_latency(hardware, stack, op, dtype, m, n, k, extra, median_us, source) "
            "VALUES('h100-sxm', 's', 'gemm', 'bf16', 1, 2, 3, 0, 4.5, 'measured');",
            nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = PerfDb::Open(path);
  REQUIRE(db.ok());
  OpMeasurement a;
  a.hardware = "h100-sxm";
  a.op = "attention_decode";
  a.dtype = "bf16";
  a.m = 32;
  a.n = 4096;
  a.k = 1;
  a.dims = "heads=16 kv_heads=1 d_qk=192 d_v=128";
  a.median_us = 40;
  REQUIRE(db->Insert(a).ok());
  auto rows = db->Query("h100-sxm", "", "");
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 2);
  CHECK((*rows)[0].op == "attention_decode");
  CHECK((*rows)[0].dims == a.dims);
  CHECK((*rows)[1].op == "gemm");
  CHECK((*rows)[1].dims.empty());
  CHECK(PerfDb::Open(path).ok());  // a second open finds the column there
  std::remove(path.c_str());

  CHECK(*DimValue(a.dims, "heads") == 16);
  CHECK(*DimValue(a.dims, "kv_heads") == 1);
  CHECK(*DimValue(a.dims, "d_v") == 128);
  CHECK_FALSE(DimValue(a.dims, "d").has_value());
  CHECK_FALSE(DimValue(a.dims, "causal").has_value());
  CHECK_FALSE(DimValue("heads=16x", "heads").has_value());
  CHECK_FALSE(DimValue("", "heads").has_value());
}

TEST_CASE("MeasuredOperators: a MoE layer's row is the routed experts of one of its GPUs",
          "[models]") {
  OpMeasurement r;
  r.op = "moe";
  r.dtype = "nvfp4";
  r.m = 1024;     // tokens reaching the layer
  r.n = 2048;     // each expert's intermediate
  r.k = 7168;     // hidden
  r.extra = 256;  // experts
  r.dims = "topk=8 tp=1 ep=8";
  auto ops = MeasuredOperators(r);
  INFO(ops.status().message());
  REQUIRE(ops.ok());
  // DeepSeek-R1's MoE layer on one GPU of EP 8 is what its builder prices for that rank.
  const ModelArch ds = *LoadModel("deepseek-r1");
  OperatorBuilder builder(ds, {8, 8, 1, 8, 8}, {DType::kNvfp4, DType::kNvfp4, DType::kFp8});
  std::vector<Operator> want;
  builder.BuildExperts(1024, 0, &want);
  REQUIRE(ops->size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK((*ops)[i].name == want[i].name);
    CHECK((*ops)[i].flops == Approx(want[i].flops));
    CHECK((*ops)[i].bytes == Approx(want[i].bytes));
    CHECK((*ops)[i].count == 1);
  }
  r.dims = "topk=8 tp=1 ep=3";
  CHECK(MeasuredOperators(r).status().message().find("ep dividing the experts") !=
        std::string::npos);
  r.op = "gemm";  // other rows: MeasuredOperator's one
  r.dims = "";
  REQUIRE(MeasuredOperators(r)->size() == 1);
  CHECK((*MeasuredOperators(r))[0].kind == OpKind::kGemm);
}

TEST_CASE("MeasuredOperators: a MoE row's balanced routing gives every expert its share",
          "[models]") {
  OpMeasurement r;
  r.op = "moe";
  r.dtype = "fp8";
  r.m = 32;  // 256 copies over 256 experts: one each, where random routing leaves a third idle
  r.n = 2048;
  r.k = 7168;
  r.extra = 256;
  r.dims = "topk=8 tp=1 ep=1";
  auto ops = MeasuredOperators(r);
  REQUIRE(ops.ok());
  CHECK((*ops)[0].active_groups == 256);
  std::vector<Operator> random;
  AddRoutedExperts({7168, 2048, 256, 8}, 32, 1, 1, DType::kFp8, 1, &random);
  CHECK(random[0].active_groups == Approx(256 * (1 - std::pow(1 - 8.0 / 256, 32))));
  r.m = 8;  // 64 copies: 64 experts
  CHECK((*MeasuredOperators(r))[0].active_groups == 64);
  r.dims = "topk=8 tp=1 ep=8";  // 8 of the copies on each GPU's 32 experts
  CHECK((*MeasuredOperators(r))[0].active_groups == 8);
}

TEST_CASE("FitExpertStreaming: recovers the experts' streaming rate from single-GPU MoE layers",
          "[models]") {
  Setup s;
  CostParams truth;
  truth.grouped_memory_efficiency = 0.62;
  Rng rng(5);
  std::vector<OpMeasurement> rows;
  auto add = [&](int64_t tokens, const char* dims) {
    OpMeasurement r;
    r.op = "moe";
    r.dtype = "fp8";
    r.m = tokens;
    r.n = 2048;
    r.k = 7168;
    r.extra = 256;
    r.dims = dims;
    const auto ops = MeasuredOperators(r);
    REQUIRE(ops.ok());
    r.median_us =
        MeasuredSeconds(*ops, s.hw, truth) * 1e6 * std::exp(0.03 * rng.Normal());  // 3% noise
    rows.push_back(r);
  };
  for (int64_t tokens : {1, 4, 16, 64, 256, 1024, 4096, 16384}) {
    add(tokens, "topk=8 tp=1 ep=1");
    add(tokens, "topk=8 tp=2 ep=1");
    add(tokens, "topk=8 tp=1 ep=8");  // dispatching to other GPUs: not fitted
  }
  const CostParams start;  // 0.80
  auto fit = FitExpertStreaming(rows, s.hw, start);
  INFO(fit.status().message());
  REQUIRE(fit.ok());
  CHECK(fit->measurements == 16);
  CHECK(fit->memory_efficiency == Approx(0.62).epsilon(0.05));
  CHECK(fit->memory_stddev > 0);
  CHECK(fit->Applied(start).grouped_memory_efficiency == fit->memory_efficiency);
  CHECK(fit->Applied(start).memory_efficiency == start.memory_efficiency);
  // FitOperators fits it where the rows hold three such layers.
  auto all = FitOperators(rows, s.hw, start);
  REQUIRE(all.ok());
  CHECK(all->experts.has_value());
  CHECK_FALSE(all->gemm.has_value());
  rows.resize(3);  // two layers at ep 1, one at ep 8
  CHECK(FitExpertStreaming(rows, s.hw, start).status().message() ==
        "expert streaming fit needs at least 3 MoE layers at ep 1");
  CHECK(FitOperators(rows, s.hw, start).status().message().find("nothing to fit") == 0);
}

TEST_CASE(
    "MXFP4 experts on a GPU without FP4 cores: priced at their dequantising kernel's rates, which "
    "a fit recovers from whole layers",
    "[models]") {
  const Hardware h200 = *(*HardwareCatalog::LoadBuiltin()).Find("h200");
  const Hardware b200 = *(*HardwareCatalog::LoadBuiltin()).Find("b200");
  OpMeasurement r;  // gpt-oss-120b's layer: 128 experts of 2,880 x 2,880, 4 a token
  r.op = "moe";
  r.dtype = "mxfp4";
  r.n = 2880;
  r.k = 2880;
  r.extra = 128;
  r.dims = "topk=4 tp=1 ep=1";
  auto layer = [&](int64_t tokens, const Hardware& hw, const CostParams& p) {
    r.m = tokens;
    const auto ops = MeasuredOperators(r);
    REQUIRE(ops.ok());
    return MeasuredSeconds(*ops, hw, p);
  };
  CostParams native;
  CostParams dequant = native;
  dequant.dequant_grouped_memory_efficiency = native.grouped_memory_efficiency / 2;
  dequant.dequant_gemm_efficiency = native.gemm_efficiency / 2;
  // Hopper dequantises: streaming-bound and math-bound layers both take longer, up to twice.
  for (int64_t tokens : {4, 16384}) {
    CHECK(layer(tokens, h200, dequant) > 1.5 * layer(tokens, h200, native));
    CHECK(layer(tokens, h200, dequant) < 2.0 * layer(tokens, h200, native));
  }
  // Blackwell has FP4 cores: its layer is the native one whatever the dequantising rates.
  CHECK(layer(64, b200, dequant) == layer(64, b200, native));
  // BF16 experts on Hopper are native too.
  r.dtype = "bf16";
  CHECK(layer(64, h200, dequant) == layer(64, h200, native));

  // A fit over such layers (and native BF16 ones beside them) recovers both rates, each kind
  // apart.
  CostParams truth = native;
  truth.grouped_memory_efficiency = 0.8;
  truth.dequant_grouped_memory_efficiency = 0.52;
  truth.dequant_gemm_efficiency = 0.4;
  Rng rng(7);
  std::vector<OpMeasurement> rows;
  for (const char* dtype : {"mxfp4", "bf16"}) {
    r.dtype = dtype;
    for (int64_t tokens : {1, 4, 16, 64, 256, 1024, 4096, 16384}) {
      r.median_us = layer(tokens, h200, truth) * 1e6 * std::exp(0.03 * rng.Normal());
      rows.push_back(r);
    }
  }
  auto fits = FitOperators(rows, h200, native);
  INFO(fits.status().message());
  REQUIRE(fits.ok());
  REQUIRE(fits->experts.has_value());
  REQUIRE(fits->dequantised_experts.has_value());
  CHECK(fits->experts->measurements == 8);
  CHECK(fits->experts->memory_efficiency == Approx(0.8).epsilon(0.05));
  const ExpertFit& d = *fits->dequantised_experts;
  CHECK(d.measurements == 8);
  CHECK(d.memory_efficiency == Approx(0.52).epsilon(0.05));
  CHECK(d.math_efficiency == Approx(0.4).epsilon(0.05));
  CHECK(d.math_stddev > 0);
  const CostParams applied = fits->Applied(native);
  CHECK(applied.grouped_memory_efficiency == fits->experts->memory_efficiency);
  CHECK(applied.dequant_grouped_memory_efficiency == d.memory_efficiency);
  CHECK(applied.dequant_gemm_efficiency == d.math_efficiency);
  // On B200 the same MXFP4 layers are native ones: nothing dequantises.
  rows.resize(8);
  CHECK(FitExpertStreaming(rows, b200, native, /*dequantised=*/true).status().message() ==
        "expert streaming fit needs at least 3 MoE layers that dequantise their weights at ep 1");
}

TEST_CASE("MeasuredOperator: attention and collective rows become the operators the model prices",
          "[models]") {
  OpMeasurement r;
  r.op = "attention_prefill";
  r.dtype = "bf16";
  r.m = 2;  // sequences
  r.n = 6;  // K/V length
  r.k = 4;  // query tokens, the last 4 of 6 positions
  r.dims = "heads=8 kv_heads=2 d_qk=128 d_v=128";
  auto full = MeasuredOperator(r);
  REQUIRE(full.ok());
  CHECK(full->kind == OpKind::kAttention);
  CHECK(full->flops == 2.0 * 8 * 256 * (2 * 4 * 6));                    // every (query, key) pair
  CHECK(full->bytes == 2 * 6 * 2 * 256 * 2.0 + 2 * 4 * 8 * 256 * 2.0);  // K/V once, Q and O once
  r.dims += " causal=1";
  auto causal = MeasuredOperator(r);
  REQUIRE(causal.ok());
  CHECK(causal->flops == 2.0 * 8 * 256 * (2 * (3 + 4 + 5 + 6)));  // the i-th query sees 3 + i keys
  r.k = 7;
  CHECK(MeasuredOperator(r).status().message().find("no more than the K/V length") !=
        std::string::npos);

  // MLA decode: values are part of the latent keys, read once.
  r.op = "attention_decode";
  r.k = 1;
  r.dims = "heads=128 kv_heads=1 d_qk=576 d_v=512 v_in_k=1";
  r.dtype = "fp8";
  auto mla = MeasuredOperator(r);
  REQUIRE(mla.ok());
  CHECK(mla->dtype == DType::kFp8);
  CHECK(mla->bytes == 2 * 6 * 576 * 1.0 + 2 * 128 * 1088 * 2.0);
  r.dims = "heads=128 d_qk=576";
  CHECK(MeasuredOperator(r).status().message().find("dims must give positive heads, kv_heads") !=
        std::string::npos);

  OpMeasurement c;
  c.op = "all_gather";
  c.dtype = "bf16";
  c.m = 1 << 20;
  c.extra = 8;
  auto gather = MeasuredOperator(c);
  REQUIRE(gather.ok());
  CHECK(gather->comm == CommKind::kAllGather);
  CHECK(gather->comm_bytes == 1 << 20);
  CHECK(gather->ranks == 8);
  c.extra = 1;
  CHECK(MeasuredOperator(c).status().message().find("ranks (extra) at least 2") !=
        std::string::npos);
  c.op = "moe_dispatch";
  CHECK(MeasuredOperator(c).status().code() == StatusCode::kNotFound);
}

TEST_CASE("InterpolateLogLog: exact at grid points, log-linear between, floor below", "[models]") {
  const std::vector<std::pair<double, double>> pts = {{16, 10}, {64, 12}, {256, 30}, {1024, 100}};
  for (const auto& [x, y] : pts) CHECK(*InterpolateLogLog(pts, x) == y);
  CHECK(*InterpolateLogLog(pts, 128) == Approx(std::sqrt(12.0 * 30.0)));  // midpoint in log space
  CHECK(*InterpolateLogLog(pts, 4) == 10);
  CHECK(*InterpolateLogLog(pts, 4096) == Approx(100 * std::pow(100.0 / 30.0, 1.0)));
  CHECK_FALSE(InterpolateLogLog({}, 5).has_value());
}

TEST_CASE("CalibratedModel: measured GEMMs replace the analytical estimate", "[models]") {
  Setup s;
  auto measured = std::make_shared<MeasuredGemms>();
  measured->Add(DType::kNvfp4, 64, 24576, 1536, 40e-6);
  measured->Add(DType::kNvfp4, 256, 24576, 1536, 80e-6);
  CalibratedModel model(s.model, s.hw, s.layout, s.precision, CostParams{}, Runtime::kPython,
                        measured);
  Operator op;
  op.kind = OpKind::kGemm;
  op.dtype = DType::kNvfp4;
  op.m = 64;
  op.n = 24576;
  op.k = 1536;
  CHECK(model.OpSeconds(op) == 40e-6);
  op.m = 128;
  CHECK(model.OpSeconds(op) == Approx(std::sqrt(40e-6 * 80e-6)));
  op.m = 1024;  // beyond the measured M range: flagged
  CHECK(model.OpSeconds(op) > 80e-6);
  op.k = 7168;  // no measurement of this shape: the analytical model answers
  CHECK(model.OpSeconds(op) != Approx(std::sqrt(40e-6 * 80e-6)));
  const MeasuredGemms::Coverage c = measured->coverage();
  CHECK(c.within == 2);
  CHECK(c.outside == 1);
  CHECK(c.unmeasured == 1);
}

TEST_CASE("FitGemmCurve: recovers the cost model's GEMM curve from noisy measurements",
          "[models]") {
  Setup s;
  CostParams truth;
  truth.fp8_gemm_efficiency = 0.62;
  truth.gemm_stream_share = 0.5;
  truth.kernel_floor_us = 4.0;
  truth.memory_efficiency = 0.72;
  Rng rng(3);
  std::vector<OpMeasurement> rows;
  auto add = [&](const std::string& op, int64_t m, int64_t n, int64_t k, int64_t groups) {
    OpMeasurement r;
    r.op = op;
    r.dtype = "fp8";
    r.m = m;
    r.n = n;
    r.k = k;
    r.extra = groups;
    const double t = OperatorSeconds(*MeasuredOperator(r), s.hw, truth, 1);
    r.median_us = t * 1e6 * std::exp(0.03 * rng.Normal());  // 3% noise
    rows.push_back(r);
  };
  for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{7168, 2048}, {4096, 7168}, {24576, 1536}})
      add("gemm", m, n, k, 0);
    if (m <= 1024) add("grouped_gemm", m, 4096, 7168, 32);
  }
  CostParams start;  // the physical defaults
  auto fit = FitGemmCurve(rows, s.hw, start);
  REQUIRE(fit.ok());
  CHECK(fit->measurements == 53);
  // B200's FP8 tensor cores: their efficiency fitted, BF16's and FP4's (no rows) left alone.
  CHECK(fit->rows_per_core == std::array<int, 3>{0, 53, 0});
  CHECK_FALSE(fit->Fitted(0));
  CHECK(fit->Applied(start).gemm_efficiency == start.gemm_efficiency);
  CHECK(fit->value[1] == Approx(truth.fp8_gemm_efficiency).epsilon(0.05));
  CHECK(fit->value[3] == Approx(truth.gemm_stream_share).epsilon(0.2));
  CHECK(fit->value[4] == Approx(truth.kernel_floor_us).epsilon(0.2));
  CHECK(fit->value[5] == Approx(truth.memory_efficiency).epsilon(0.05));
  CHECK(fit->stddev[1] > 0);
  CHECK(fit->stddev[1] < 0.05);
  // Rows that are not GEMMs are left out; a GEMM row with a bad dtype is an error.
  OpMeasurement other = rows.front();
  other.op = "all_reduce";
  rows.push_back(other);
  CHECK(FitGemmCurve(rows, s.hw, start)->measurements == 53);
  OpMeasurement bad = rows.front();
  bad.dtype = "int3";
  rows.push_back(bad);
  auto refused = FitGemmCurve(rows, s.hw, start);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("int3") != std::string::npos);
}

TEST_CASE("LoadCalibration: the shipped calibration loads; bad values name the field", "[models]") {
  auto c = LoadCalibration(DefaultCalibrationPath());
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->params.Validate().ok());
  CostParams p;
  p.memory_efficiency = 1.5;
  CHECK(p.Validate().message() == "memory_efficiency = 1.500000: must be in (0, 1]");
  p = CostParams{};
  p.grouped_memory_efficiency = 0;
  CHECK(p.Validate().message() == "grouped_memory_efficiency = 0.000000: must be in (0, 1]");
  p = CostParams{};
  p.fp8_grouped_memory_efficiency = 1.2;
  CHECK(p.Validate().message() ==
        "fp8_grouped_memory_efficiency (0: grouped_memory_efficiency) = 1.200000: must be in (0, "
        "1]");
  // The dequantising experts' rates: fractions, and both or neither.
  p = CostParams{};
  p.dequant_grouped_memory_efficiency = 0.55;
  p.dequant_gemm_efficiency = 1.5;
  CHECK(p.Validate().message() ==
        "dequant_gemm_efficiency (0: as native kernels) = 1.500000: must be in (0, 1]");
  p.dequant_gemm_efficiency = 0;
  CHECK(p.Validate().message() ==
        "dequant_grouped_memory_efficiency and dequant_gemm_efficiency: set both (the path of "
        "experts a GPU dequantises) or neither");
  p.dequant_gemm_efficiency = 0.39;
  CHECK(p.Validate().ok());
  auto half = CalibrationFromJson(
      Json::parse(R"({"params": {"dequant_grouped_memory_efficiency": 0.55}})"), "cal.json");
  REQUIRE_FALSE(half.ok());
  CHECK(half.status().message().rfind("cal.json: dequant_grouped_memory_efficiency and", 0) == 0);
  // The CUDA-graph sizes and stream interval: the file, the field, the value and the rule.
  const std::pair<const char*, const char*> bad[] = {
      {R"({"cuda_graph_batch_sizes": 8})",
       "cal.json: params: field 'cuda_graph_batch_sizes' = 8: expected an array of integers"},
      {R"({"cuda_graph_batch_sizes": [1, 2.5]})",
       "cal.json: params: field 'cuda_graph_batch_sizes' = 2.5: entries must be integers"},
      {R"({"cuda_graph_batch_sizes": [4, 2]})",
       "cal.json: cuda_graph_batch_sizes: 2: must be positive and ascending"},
      {R"({"stream_interval": "x"})",
       "cal.json: params: field 'stream_interval' = \"x\": must be an integer"},
      {R"({"stream_interval": -1})", "cal.json: stream_interval = -1: must be >= 0"},
      {R"({"fp4_gemm_efficiency": 0})",
       "cal.json: fp4_gemm_efficiency = 0.000000: must be in (0, 1]"},
      {R"({"cpp_launch_us": -1})", "cal.json: cpp_launch_us = -1.000000: must be >= 0"},
      {R"({"gemm_efficency": 0.7})",
       "cal.json: params: field 'gemm_efficency': not a cost parameter"},
      {R"({"gemm_m_half": 166})",
       "cal.json: params: field 'gemm_m_half': not a cost parameter (an older fathom's small-M "
       "loss; refit it as gemm_stream_share with `fathom profile compare --fit --out FILE`)"},
  };
  for (const auto& [params, message] : bad) {
    auto loaded =
        CalibrationFromJson(Json::parse(std::string(R"({"params": )") + params + "}"), "cal.json");
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.status().message() == message);
  }
}

TEST_CASE(
    "OperatorSeconds: a GEMM fused with its all-reduce overlaps them wave by wave within a "
    "domain",
    "[models]") {
  auto hw = *(*HardwareCatalog::LoadBuiltin()).Find("h200");
  REQUIRE(hw.sms == 132);
  CostParams p;
  auto priced = [&](int64_t m, int span, const Hardware& gpu) {
    const Operator gemm = Gemm("down", 1, m, 16384, 6656, DType::kFp8);
    Operator fused = gemm;
    fused.comm = CommKind::kAllReduce;
    fused.comm_bytes = m * 16384.0 * 2;
    fused.ranks = 8;
    fused.span = span;
    const Operator ar = Comm("ar", 1, CommKind::kAllReduce, fused.comm_bytes, 8, span);
    return std::array<double, 3>{OperatorSeconds(gemm, gpu, p, 1), OperatorSeconds(ar, gpu, p, 1),
                                 OperatorSeconds(fused, gpu, p, 1)};
  };
  // 4,096 rows: 32 x 128 tiles of 128 x 128 on 132 SMs, 32 waves.
  auto [gemm, ar, fused] = priced(4096, 8, hw);
  CHECK(fused == Approx(std::max(gemm, ar) + std::min(gemm, ar) / 32));
  CHECK(fused < gemm + ar);
  // A decode step's 64 rows are one wave of 128 tiles: the reduction waits for all of it.
  auto [g1, a1, f1] = priced(64, 8, hw);
  CHECK(f1 == Approx(g1 + a1));
  // Across scale-up domains, or on a GPU whose SMs are unknown, they run in turn.
  auto [g2, a2, f2] = priced(4096, 16, hw);
  CHECK(f2 == Approx(g2 + a2));
  Hardware unknown = hw;
  unknown.sms = 0;
  auto [g3, a3, f3] = priced(4096, 8, unknown);
  CHECK(f3 == Approx(g3 + a3));
}

TEST_CASE("AllReduceTables: measured all-reduces price those they cover, the formula the rest",
          "[models]") {
  auto hw = *(*HardwareCatalog::LoadBuiltin()).Find("h200");
  CostParams p;
  p.all_reduce.Add("h200", 8, 1 << 20, 20);  // microseconds
  p.all_reduce.Add("h200", 8, 4 << 20, 40);
  p.all_reduce.Add("h200", 8, 256, 4);
  auto ar = [&](double bytes, int ranks, int span) {
    return OperatorSeconds(Comm("ar", 1, CommKind::kAllReduce, bytes, ranks, span), hw, p, 1);
  };
  CHECK(ar(1 << 20, 8, 8) == Approx(20e-6));
  CHECK(ar(2 << 20, 8, 8) == Approx(std::sqrt(20e-6 * 40e-6)));  // halfway in log-log
  CHECK(ar(64, 8, 8) == Approx(4e-6));                           // below: the smallest's
  CHECK(ar(16 << 20, 8, 8) == Approx(80e-6));                    // above: the last slope
  CostParams formula = p;
  formula.all_reduce = {};
  // No table for 4 ranks, another GPU, a group past the scale-up domain or an all-gather.
  CHECK(
      ar(1 << 20, 4, 4) ==
      Approx(OperatorSeconds(Comm("ar", 1, CommKind::kAllReduce, 1 << 20, 4, 4), hw, formula, 1)));
  CHECK(
      ar(1 << 20, 8, 16) ==
      Approx(OperatorSeconds(Comm("ar", 1, CommKind::kAllReduce, 1 << 20, 8, 16), hw, formula, 1)));
  auto b200 = *(*HardwareCatalog::LoadBuiltin()).Find("b200");
  const Operator op = Comm("ar", 1, CommKind::kAllReduce, 1 << 20, 8, 8);
  CHECK(OperatorSeconds(op, b200, p, 1) == Approx(OperatorSeconds(op, b200, formula, 1)));
  const Operator gather = Comm("ag", 1, CommKind::kAllGather, 1 << 20, 8, 8);
  CHECK(OperatorSeconds(gather, hw, p, 1) == Approx(OperatorSeconds(gather, hw, formula, 1)));
  // A calibration file's tables: bytes and microseconds; bad ones are named.
  const std::string good =
      R"({"params": {}, "all_reduce_tables": {"h200": {"8": [[256, 4], [1048576, 20]]}}})";
  auto loaded = CalibrationFromJson(Json::parse(good), "cal.json");
  REQUIRE(loaded.ok());
  CHECK(*loaded->params.all_reduce.Seconds("h200", 8, 1 << 20) == Approx(20e-6));
  const std::pair<const char*, const char*> bad[] = {
      {R"({"h200": {"1": [[256, 4]]}})",
       "cal.json: all_reduce_tables.h200.1: ranks must be an integer from 2 to 1048576"},
      {R"({"h200": {"8": []}})",
       "cal.json: all_reduce_tables.h200.8: not a list of [bytes, microseconds]"},
      {R"({"h200": {"8": [[256, -4]]}})",
       "cal.json: all_reduce_tables.h200.8: [256,-4]: not [bytes, microseconds], both positive"},
      {R"({"h200": [1]})", "cal.json: all_reduce_tables.h200: not an object"},
  };
  for (const auto& [tables, message] : bad) {
    auto b = CalibrationFromJson(
        Json::parse(std::string(R"({"params": {}, "all_reduce_tables": )") + tables + "}"),
        "cal.json");
    REQUIRE_FALSE(b.ok());
    CHECK(b.status().message() == message);
  }
}

TEST_CASE("Calibration: written and read back, every field is equal", "[models]") {
  Calibration c;
  c.params = {0.61, 0.47, 0.63, 0.7, 0.79, 0.74, 0.52, 0.5, 0.38, 0.41, 2.5,          0.81, 9, 0.3,
              0.2,  260,  0.6,  170, 0.4,  6.5,  0.15, 57,  33,   true, {1, 64, 512}, 20,   {}};
  c.params.all_reduce.Add("h200", 8, 1 << 20, 19.6);
  c.params.all_reduce.Add("h200", 8, 256, 3.5);
  c.params.all_reduce.Add("b200", 4, 1 << 20, 9.8);
  c.stddev = {0.01, 0.02, 3, 0.05, 4, 0.06, 0.8, 7, 0.03, 0.04, 0.3};
  c.fitted_hardware = {"h200", "b200"};
  c.note = "fitted on MLPerf v5.1";
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_calibration.json").string();
  REQUIRE(WriteFileAtomic(path, ToJson(c).dump(2)).ok());
  auto back = LoadCalibration(path);
  INFO(back.status().message());
  REQUIRE(back.ok());
  CHECK(*back == c);
  std::filesystem::remove(path);
}

}  // namespace fathom::models
