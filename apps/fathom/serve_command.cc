// fathom serve: the simulator's engine behind an OpenAI-compatible HTTP server, paced in real time.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <tuple>

#include "apps/fathom/commands.h"
#include "apps/fathom/time_model_flags.h"
#include "base/json_fields.h"
#include "models/deployment.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "sim/serving/http_text.h"
#include "sim/serving/live_engine.h"
#include "sim/serving/openai_server.h"
#include "tuner/search/launch.h"

namespace fathom::cli {
namespace {

// vLLM's engine arguments (the ones fathom's launch commands write), then fathom's own.
struct ServeFlags {
  std::string model;  // a Hugging Face repository fathom knows, a built-in name or a config.json
  int tensor_parallel = 1, pipeline_parallel = 1, data_parallel = 1;
  bool expert_parallel = false;
  int64_t max_num_seqs = 256, max_num_batched_tokens = 8192;
  bool chunked_prefill = true, prefix_caching = false;
  std::string kv_cache_dtype = "auto";
  double gpu_memory_utilization = 0.9;
  std::string speculative_config;
  std::string hardware{models::kDefaultHardware};
  std::vector<std::string> hardware_files;
  std::string weights, quantization;
  std::string deployment_file;
  std::vector<CLI::Option*> vllm_options;  // must not be mixed with --deployment
  sim::TimeModelOptions time_model;
  sim::ServeOptions serve;
  double time_scale = 1;
  double shutdown_timeout_s = 30;
};

// Whether the user gave the vLLM flag `name`.
bool Given(const ServeFlags& f, const std::string& name) {
  for (const CLI::Option* o : f.vllm_options) {
    if (o->check_name(name)) return o->count() > 0;
  }
  return false;
}

// Whether the user gave any of vLLM's layout flags.
bool LayoutGiven(const ServeFlags& f) {
  return Given(f, "--tensor-parallel-size") || Given(f, "--pipeline-parallel-size") ||
         Given(f, "--data-parallel-size") || Given(f, "--enable-expert-parallel");
}

Result<sim::DeploymentConfig> BuildDeployment(const ServeFlags& f) {
  if (!f.deployment_file.empty()) {
    for (CLI::Option* o : f.vllm_options) {
      if (o->count() > 0)
        return Status::InvalidArgument(
            o->get_name() + ": give the deployment's knobs in --deployment's file, not both");
    }
    FATHOM_ASSIGN_OR_RETURN(sim::DeploymentFile file, sim::LoadDeploymentFile(f.deployment_file));
    return file.config;
  }
  if (f.model.empty())
    return Status::InvalidArgument(
        "serve: name the model (as `vllm serve MODEL`) or give --deployment FILE");
  auto positive = [](const char* flag, int64_t v) -> Status {
    if (v < 1)
      return Status::InvalidArgument(std::string(flag) + " = " + std::to_string(v) +
                                     ": must be >= 1");
    return Status::Ok();
  };
  FATHOM_RETURN_IF_ERROR(positive("--tensor-parallel-size", f.tensor_parallel));
  FATHOM_RETURN_IF_ERROR(positive("--pipeline-parallel-size", f.pipeline_parallel));
  FATHOM_RETURN_IF_ERROR(positive("--data-parallel-size", f.data_parallel));
  FATHOM_RETURN_IF_ERROR(positive("--max-num-seqs", f.max_num_seqs));
  FATHOM_RETURN_IF_ERROR(positive("--max-num-batched-tokens", f.max_num_batched_tokens));
  if (!(f.gpu_memory_utilization > 0 && f.gpu_memory_utilization <= 1)) {
    return Status::InvalidArgument("--gpu-memory-utilization: must be in (0, 1]");
  }
  sim::DeploymentConfig d;
  d.model = f.model;
  d.weights = f.weights;
  if (auto served = tuner::FromHuggingFaceId(f.model)) {
    d.model = served->model;
    if (d.weights.empty()) d.weights = served->weights;
  }
  if (!f.quantization.empty()) {
    if (f.quantization != "fp8")
      return Status::InvalidArgument("--quantization = " + f.quantization +
                                     ": fathom serves fp8 only");
    if (!f.weights.empty())
      return Status::InvalidArgument("--quantization: give it or --weights, not both");
    d.weights = "fp8";
  }
  if (d.weights.empty()) d.weights = "bf16";  // a config.json of fathom's own
  d.hardware = f.hardware;
  // vLLM's data-parallel ranks are attention-DP ranks of one instance when experts are spread
  // over them, and independent replicas otherwise.
  d.pp = f.pipeline_parallel;
  if (f.expert_parallel) {
    d.tp = f.tensor_parallel * f.data_parallel;
    d.attn_dp = f.data_parallel;
    d.ep = d.tp;
    d.gpus = d.tp * d.pp;
  } else {
    d.tp = f.tensor_parallel;
    d.attn_dp = d.ep = 1;
    d.gpus = d.tp * d.pp * f.data_parallel;
  }
  // Without layout flags the built-in default model serves on the built-in default deployment
  // (MLPerf's on 8 B200s), as `simulate` and `tune` do; any of vLLM's layout flags overrides it.
  const bool default_deployment =
      !LayoutGiven(f) && d.model == models::kDefaultModel && d.hardware == models::kDefaultHardware;
  if (default_deployment) {
    const models::ParallelLayout& l = models::kDefaultLayout;
    std::tie(d.gpus, d.tp, d.pp, d.ep, d.attn_dp) = std::tie(l.gpus, l.tp, l.pp, l.ep, l.attn_dp);
    if (f.weights.empty() && f.quantization.empty() && f.model == models::kDefaultModel)
      d.weights = models::kDefaultWeights;
  }
  if (default_deployment && !Given(f, "--kv-cache-dtype")) {
    d.kv = models::kDefaultKv;
  } else if (f.kv_cache_dtype.rfind("fp8", 0) == 0) {
    d.kv = "fp8";
  } else if (f.kv_cache_dtype == "auto" || f.kv_cache_dtype == "bfloat16") {
    d.kv = "bf16";
  } else {
    return Status::InvalidArgument("--kv-cache-dtype = " + f.kv_cache_dtype +
                                   ": auto, bfloat16, fp8, fp8_e4m3 or fp8_e5m2");
  }
  d.engine.max_batch = f.max_num_seqs;
  d.engine.max_num_tokens = f.max_num_batched_tokens;
  d.engine.scheduler =
      f.chunked_prefill ? sim::SchedulerKind::kChunked : sim::SchedulerKind::kPrefillFirst;
  d.engine.reserve_fraction = 1.0 - f.gpu_memory_utilization;
  d.engine.prefix_caching = f.prefix_caching;
  if (!f.speculative_config.empty()) {
    FATHOM_ASSIGN_OR_RETURN(Json spec, ParseJson(f.speculative_config, "--speculative-config"));
    JsonFields fields(spec, "--speculative-config");
    d.engine.mtp_depth = static_cast<int>(fields.Int("num_speculative_tokens"));
    FATHOM_RETURN_IF_ERROR(fields.status());
    d.engine.acceptance = 0.7;  // as the tuner assumes; acceptance rates are not published
  }
  return d;
}

// The longest request (prompt plus max_tokens) served: `asked` (--max-model-len) or the model's
// context, within what one rank's KV cache holds, past which a request could never be scheduled.
Result<int64_t> MaxModelLen(const sim::ResolvedDeployment& r, int64_t asked) {
  const sim::SimulationSpec& spec = r.spec;
  int64_t kv_tokens = spec.pool.kv_blocks_per_rank * spec.engine.block_tokens;
  if (spec.decode_pool) {
    kv_tokens =
        std::min(kv_tokens, spec.decode_pool->kv_blocks_per_rank * spec.decode_engine.block_tokens);
  }
  if (asked > kv_tokens) {  // vLLM refuses to start on this too
    return Status::InvalidArgument("--max-model-len = " + std::to_string(asked) +
                                   ": more than the " + std::to_string(kv_tokens) +
                                   " tokens one rank's KV cache holds (raise "
                                   "--gpu-memory-utilization or give fewer tokens)");
  }
  if (asked > 0) return asked;
  return r.model.max_context > 0 ? std::min(r.model.max_context, kv_tokens) : kv_tokens;
}

Status Run(const ServeFlags& f) {
  if (!(f.time_scale > 0) || !std::isfinite(f.time_scale))
    return Status::InvalidArgument("--time-scale: must be > 0 and finite");
  if (!(f.shutdown_timeout_s >= 0) || !std::isfinite(f.shutdown_timeout_s)) {
    return Status::InvalidArgument("--shutdown-timeout: must be >= 0 and finite");
  }
  FATHOM_RETURN_IF_ERROR(f.serve.Validate());
  FATHOM_ASSIGN_OR_RETURN(sim::DeploymentConfig d, BuildDeployment(f));
  FATHOM_ASSIGN_OR_RETURN(models::HardwareCatalog catalog,
                          models::HardwareCatalog::Load(f.hardware_files));
  FATHOM_ASSIGN_OR_RETURN(sim::TimeModel time_model,
                          sim::MakeTimeModel(f.time_model, catalog, d.hardware));
  auto resolved = sim::Resolve(d, catalog, time_model.factory);
  // Without layout flags, a model that does not fit one GPU is served on the fewest GPUs of a
  // node (tensor parallel) that hold it, where vLLM would fail to start.
  if (!resolved.ok() && f.deployment_file.empty() && !LayoutGiven(f) && d.gpus == 1) {
    for (int tp : {2, 4, 8}) {
      sim::DeploymentConfig wider = d;
      wider.tp = wider.gpus = tp;
      auto r = sim::Resolve(wider, catalog, time_model.factory);
      if (!r.ok()) continue;
      std::fprintf(stderr,
                   "fathom serve: %s does not fit one %s; serving it on %d (tensor parallel; "
                   "--tensor-parallel-size chooses)\n",
                   d.model.c_str(), d.hardware.c_str(), tp);
      d = wider;
      resolved = std::move(r);
      break;
    }
  }
  if (!resolved.ok()) return resolved.status();
  sim::ServeOptions options = f.serve;
  FATHOM_ASSIGN_OR_RETURN(options.max_model_len, MaxModelLen(**resolved, f.serve.max_model_len));
  if (options.served_model_name.empty())
    options.served_model_name =
        f.model.empty() ? tuner::HuggingFaceId(d.model, d.weights) : f.model;

  // SIGINT and SIGTERM are taken by this thread alone (blocked before any other thread starts).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  sim::LiveEngine engine(std::move(*resolved), f.time_scale);
  sim::OpenAiServer server(&engine, options);
  FATHOM_RETURN_IF_ERROR(server.Bind());
  std::fprintf(stderr,
               "fathom serve: %s on %d x %s (TP%d PP%d EP%d attnDP%d, batch %lld, %lld tokens, "
               "max model len %lld), time scale %g\n",
               d.model.c_str(), d.gpus, d.hardware.c_str(), d.tp, d.pp, d.ep, d.attn_dp,
               static_cast<long long>(d.engine.max_batch),
               static_cast<long long>(d.engine.max_num_tokens),
               static_cast<long long>(options.max_model_len), f.time_scale);
  std::thread http([&] { server.Serve(); });
  server.WaitReady();
  std::fprintf(stderr, "fathom serve: listening on http://%s:%d (model %s)\n", options.host.c_str(),
               server.port(), options.served_model_name.c_str());
  if (!sim::http::IsLoopbackHost(options.host) && options.api_key.empty()) {
    std::fprintf(stderr,
                 "fathom serve: warning: %s is reachable from other hosts and no --api-key is "
                 "set: anyone who reaches it can send requests\n",
                 options.host.c_str());
  }

  int signal = 0;
  sigwait(&signals, &signal);
  // Stop admitting, let what is in flight finish (up to the timeout), then close.
  engine.BeginDrain();
  const int64_t draining = engine.in_flight();
  std::fprintf(stderr, "fathom serve: %s: draining %lld requests (at most %g s)\n",
               signal == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<long long>(draining),
               f.shutdown_timeout_s);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(f.shutdown_timeout_s);
  while (engine.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int64_t aborted = engine.in_flight();
  engine.Stop();  // what is left ends with an error to its client
  std::this_thread::sleep_for(
      std::chrono::milliseconds(200));  // let the handlers send their last events
  server.Stop();
  http.join();
  std::fprintf(stderr,
               "fathom serve: stopped; %lld requests finished during the drain, %lld aborted\n",
               static_cast<long long>(draining - aborted), static_cast<long long>(aborted));
  return Status::Ok();
}

}  // namespace

void RegisterServe(CLI::App& app, Status* result) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve",
                                     "Serve a deployment over an OpenAI-compatible HTTP API, paced "
                                     "by the simulator (vLLM's flags)");
  cmd->add_option(
      "model", f->model,
      "Model: a Hugging Face repository fathom knows, a built-in name or a config.json");
  auto vllm = [&](CLI::Option* o) { f->vllm_options.push_back(o); };
  vllm(cmd->add_option("--tensor-parallel-size", f->tensor_parallel,
                       "Tensor-parallel GPUs per rank (-tp)")
           ->capture_default_str());
  vllm(cmd->add_option("--pipeline-parallel-size", f->pipeline_parallel, "Pipeline stages (-pp)")
           ->capture_default_str());
  vllm(cmd->add_option("--data-parallel-size", f->data_parallel,
                       "Data-parallel ranks (-dp; attention DP with --enable-expert-parallel)")
           ->capture_default_str());
  vllm(cmd->add_flag("--enable-expert-parallel", f->expert_parallel,
                     "Experts spread over every GPU of the instance"));
  vllm(cmd->add_option("--max-num-seqs", f->max_num_seqs, "Running sequences per rank")
           ->capture_default_str());
  vllm(cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens,
                       "Tokens per iteration per rank")
           ->capture_default_str());
  vllm(cmd->add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", f->chunked_prefill,
                     "Chunked prefill (on by default, as in vLLM V1)"));
  vllm(cmd->add_flag("--enable-prefix-caching", f->prefix_caching, "Prefix caching"));
  vllm(cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype, "auto, bfloat16 or fp8")
           ->capture_default_str());
  vllm(cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                       "Fraction of GPU memory used")
           ->capture_default_str());
  vllm(cmd->add_option("--speculative-config", f->speculative_config,
                       "JSON with num_speculative_tokens (MTP depth)"));
  vllm(cmd->add_option("--hardware", f->hardware, "GPU from `fathom hardware list`")
           ->capture_default_str());
  vllm(cmd->add_option("--weights", f->weights, "Weight format (default: the repository's)"));
  vllm(cmd->add_option("--quantization", f->quantization,
                       "fp8: weights quantized to FP8 at load, as vLLM does"));
  cmd->add_option("--hardware-file", f->hardware_files, "Add a GPU from your own JSON file");
  cmd->add_option("--deployment", f->deployment_file,
                  "Deployment JSON (as `fathom tune --best-out` writes it) instead of the flags");
  AddTimeModelFlags(cmd, &f->time_model);
  cmd->add_option("--host", f->serve.host, "Address to listen on (loopback unless you open it)")
      ->capture_default_str();
  cmd->add_option("--port", f->serve.port, "Port (0: any free one, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("--served-model-name", f->serve.served_model_name,
                  "Model id clients send (default: the model argument)");
  cmd->add_option("--api-key", f->serve.api_key, "Require this bearer token on /v1/*");
  cmd->add_option("--max-model-len", f->serve.max_model_len,
                  "Longest prompt plus max_tokens a request may take (default: the model's "
                  "context, within one rank's KV cache); longer ones are answered 400");
  cmd->add_option("--max-connections", f->serve.max_connections,
                  "Concurrent connections; at the limit the longest idle one makes room (503 when "
                  "none is idle)")
      ->capture_default_str();
  cmd->add_option("--time-scale", f->time_scale,
                  "Simulated seconds per wall second (> 1 runs faster than real time)")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", f->shutdown_timeout_s,
                  "Seconds SIGTERM waits for requests in flight")
      ->capture_default_str();
  cmd->add_option("--stall-timeout", f->serve.stall_timeout_s,
                  "Wall seconds without a token, with requests in flight, after which /health "
                  "answers 503")
      ->capture_default_str();
  cmd->callback([f, result] { *result = Run(*f); });
}

std::string ServeLongFlag(const std::string& word) {
  static const std::pair<const char*, const char*> kShort[] = {{"-tp", "--tensor-parallel-size"},
                                                               {"-pp", "--pipeline-parallel-size"},
                                                               {"-dp", "--data-parallel-size"}};
  for (const auto& [flag, long_flag] : kShort) {
    if (word == flag) return long_flag;
    if (word.rfind(std::string(flag) + "=", 0) == 0) return long_flag + word.substr(3);
  }
  return word;
}

}  // namespace fathom::cli
