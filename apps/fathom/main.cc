// fathom: simulate and tune LLM inference deployments.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/fathom/commands.h"

namespace {

// Levenshtein distance, for "did you mean".
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The closest of `names` to `word` ("" when none is close): a prefix, or a few edits away.
std::string Nearest(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& n : names) {
    const size_t d = n.rfind(word, 0) == 0 ? 1 : EditDistance(word, n);
    if (d < best_distance) {
      best_distance = d;
      best = n;
    }
  }
  return best;
}

std::vector<std::string> SubcommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// The innermost subcommand the user named (the app itself when none).
const CLI::App* Innermost(const CLI::App& app) {
  const CLI::App* at = &app;
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (const CLI::App* sub : at->get_subcommands()) {
      at = sub;
      deeper = true;
      break;
    }
  }
  return at;
}

// "fathom profile summarize": the command as the user typed it.
std::string CommandPath(const CLI::App* app) {
  std::string path;
  for (; app != nullptr && app->get_parent() != nullptr; app = app->get_parent())
    path = " " + app->get_name() + path;
  return "fathom" + path;
}

// Unknown commands and flags are errors naming the nearest valid one (exit 2), even when --help
// follows them, which CLI11 would otherwise answer with the main help.
int UsageError(const std::string& message) {
  std::fprintf(stderr, "fathom: error: %s\n", message.c_str());
  return 2;
}

// Each command's job (its group in `fathom --help`) and examples that run as printed from the
// repository's root, in order; a line ending in & starts a server the next lines use
// (tests/help_examples_test.sh runs every one).
struct CommandHelp {
  const char* command;
  const char* group;
  std::vector<const char*> examples;
};

const std::vector<CommandHelp>& Help() {
  static const std::vector<CommandHelp> help = {
      {"tune",
       "Plan",
       {"fathom tune",
        "fathom tune --model llama2-70b --hardware h200 --scenario server --weights fp8 "
        "--max-batch 128 256 --no-disagg --best-out best.json"}},
      {"simulate",
       "Plan",
       {"fathom simulate",
        "fathom simulate --model llama2-70b --hardware h200 --tp 8 --scenario server --qps 10"}},
      {"autoscale",
       "Plan",
       {"fathom autoscale --deployment docs/examples/llama2-70b-h200-tp1.json --trace "
        "traces/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv --phase-s 900"}},
      {"memory",
       "Plan",
       {"fathom memory", "fathom memory --model llama2-70b --hardware h100-sxm --tp 4"}},
      {"report",
       "Plan",
       {"fathom tune --model llama2-70b --hardware h200 --scenario server --weights fp8 "
        "--max-batch 128 256 --no-disagg --db tune.db",
        "fathom report --db tune.db --out report.html --price h200=3.8"}},
      {"calibrate", "Measure", {"fathom calibrate --results models/calibration/mlperf_v6.0.csv"}},
      {"intervals", "Measure", {"fathom intervals"}},
      {"profile",
       "Measure",
       {"fathom profile summarize profiler/data/fathom/h200.db",
        "fathom profile compare profiler/data/fathom/h100-sxm.db --fit"}},
      {"loadgen",
       "Measure",
       {"fathom serve llama2-70b --tensor-parallel-size 2 --time-scale 20 &",
        "fathom loadgen --model llama2-70b --scenario offline --samples 40 --min-duration 0 "
        "--time-scale 20"}},
      {"serve",
       "Serve",
       {"fathom serve llama2-70b --tensor-parallel-size 2 --time-scale 20 &",
        "fathom loadgen --model llama2-70b --scenario server --qps 2 --samples 40 --min-duration 0 "
        "--time-scale 20"}},
      {"gateway",
       "Serve",
       {"fathom serve llama2-70b --tensor-parallel-size 2 --time-scale 20 --port 8001 &",
        "fathom gateway --replica 127.0.0.1:8001 --port 8000 &",
        "fathom loadgen --model llama2-70b --scenario server --qps 2 --samples 40 --min-duration 0 "
        "--time-scale 20"}},
      {"online", "Serve", {"fathom online --initial-batch 32 --windows 20"}},
      {"sweep", "Sweep", {"fathom sweep docs/examples/sweep_plan.json --db sweep.db"}},
      {"merge",
       "Sweep",
       {"fathom sweep docs/examples/sweep_plan.json --db shard0.db --shard 0/2",
        "fathom sweep docs/examples/sweep_plan.json --db shard1.db --shard 1/2",
        "fathom merge shard0.db shard1.db --out merged.db"}},
      {"hardware", "Inspect", {"fathom hardware list", "fathom hardware show h200"}},
      {"model",
       "Inspect",
       {"fathom model list", "fathom model show models/configs/qwen3-235b-a22b.json"}},
      {"trace",
       "Inspect",
       {"fathom trace stats traces/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
        "fathom trace synth --out synth.jsonl --requests 200 --rate 2"}},
      {"stack", "Inspect", {"fathom stack list", "fathom stack diff trtllm-1.0 trtllm-1.2"}},
  };
  return help;
}

const CommandHelp* FindHelp(const std::string& command) {
  for (const CommandHelp& h : Help()) {
    if (command == h.command) return &h;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fathom: a discrete-event simulator and autotuner for LLM inference deployments.\n"
      "Run `fathom tune` for the main job on the built-in default (DeepSeek-R1 on 8xB200)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fathom 0.1.0");
  fathom::Status result;
  // Registered by job: `fathom --help` lists the groups in this order.
  fathom::cli::RegisterTune(app, &result);
  fathom::cli::RegisterSimulate(app, &result);
  fathom::cli::RegisterAutoscale(app, &result);
  fathom::cli::RegisterMemory(app, &result);
  fathom::cli::RegisterReport(app, &result);
  fathom::cli::RegisterCalibrate(app, &result);
  fathom::cli::RegisterIntervals(app, &result);
  fathom::cli::RegisterProfile(app, &result);
  fathom::cli::RegisterLoadgen(app, &result);
  fathom::cli::RegisterServe(app, &result);
  fathom::cli::RegisterGateway(app, &result);
  fathom::cli::RegisterOnline(app, &result);
  fathom::cli::RegisterSweep(app, &result);
  fathom::cli::RegisterMerge(app, &result);
  fathom::cli::RegisterHardware(app, &result);
  fathom::cli::RegisterModel(app, &result);
  fathom::cli::RegisterTrace(app, &result);
  fathom::cli::RegisterStack(app, &result);
  for (CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    const CommandHelp* help = FindHelp(command->get_name());
    if (help == nullptr) continue;
    command->group(help->group);
    std::string footer = "Examples (from the repository's root):";
    for (const char* line : help->examples) footer += std::string("\n  ") + line;
    command->footer(footer);
  }

  // The first word that is not a flag must be a command, and so must the word after a command
  // that has subcommands of its own (`fathom trace stats`).
  const CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    if (word.rfind('-', 0) == 0) {
      if (at == &app) continue;  // main-level flags (--help, --version)
      break;
    }
    const std::vector<std::string> names = SubcommandNames(*at);
    if (names.empty()) break;
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->check_name(word)) next = sub;
    }
    if (next == nullptr) {
      const std::string command = CommandPath(at);
      const std::string nearest = Nearest(word, names);
      std::string all;
      for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
      return UsageError("unknown command \"" + word + "\" for " + command +
                        (nearest.empty() ? "" : " (did you mean " + nearest + "?)") +
                        "; the commands: " + all);
    }
    at = next;
  }

  std::vector<std::string> words(argv, argv + argc);
  if (argc > 1 && words[1] == "serve") {
    for (std::string& w : words) w = fathom::cli::ServeLongFlag(w);
  }
  std::vector<char*> spelled;
  for (std::string& w : words) spelled.push_back(w.data());
  argv = spelled.data();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    // Name the first unexpected flag and the nearest flag of the command it was given to.
    const CLI::App* command = Innermost(app);
    std::vector<std::string> flags;
    for (const CLI::Option* o : command->get_options()) {
      for (const std::string& name : o->get_lnames()) flags.push_back("--" + name);
    }
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (word == "--") break;
      if (word.rfind("--", 0) != 0) continue;
      const std::string flag = word.substr(0, word.find('='));
      if (std::find(flags.begin(), flags.end(), flag) == flags.end()) {
        const std::string nearest = Nearest(flag, flags);
        return UsageError("unknown flag " + flag + " for " + CommandPath(command) +
                          (nearest.empty() ? "; see " + CommandPath(command) + " --help"
                                           : " (did you mean " + nearest + "?)"));
      }
    }
    return UsageError(e.what());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // Last resort: no input may crash fathom silently; reaching here is a bug.
    std::fprintf(
        stderr,
        "fathom: internal error: %s (a bug in fathom: please report it with the command line)\n",
        e.what());
    return 70;
  }
  if (!result.ok()) {
    std::fprintf(stderr, "fathom: error: %s\n", result.message().c_str());
    return 2;
  }
  return 0;
}
