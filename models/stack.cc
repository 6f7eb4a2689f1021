#include "models/stack.h"

#include <algorithm>
#include <cctype>

#include "base/files.h"

namespace fathom::models {

bool Stack::RunsOn(const std::string& vendor) const {
  return std::find(vendors.begin(), vendors.end(), vendor) != vendors.end();
}

std::string Stack::CalibrationPath() const { return DataDir() + "/" + calibration; }

OrderedJson Stack::ToJson() const {
  OrderedJson j;
  j["name"] = name;
  j["engine"] = engine;
  j["vendors"] = vendors;
  j["version"] = version;
  j["calibrated_on"] = calibrated_on;
  j["calibration"] = calibration;
  j["fitted_on"] = {{"results", fitted_results}, {"rows", fitted_rows}};
  j["cpp_runtime_model_types"] = cpp_model_types;
  j["search"] = {{"scheduler_steps", search.scheduler_steps},
                 {"attention_dp_balance", search.attention_dp_balance},
                 {"async_scheduling", search.async_scheduling},
                 {"prefill_first", search.prefill_first}};
  j["features"] = features;
  j["sources"] = sources;
  return j;
}

std::string DefaultStacksPath() { return DataDir() + "/models/stacks.json"; }

Result<std::vector<Stack>> LoadStacks(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  if (!j.is_object() || !j.contains("stacks") || !j["stacks"].is_array() || j["stacks"].empty()) {
    return Status::InvalidArgument(path + ": field 'stacks': missing (required non-empty array)");
  }
  std::vector<Stack> out;
  for (size_t i = 0; i < j["stacks"].size(); ++i) {
    const Json& e = j["stacks"][i];
    const std::string where = path + ": stacks[" + std::to_string(i) + "]";
    JsonFields f(e, where);
    Stack s;
    s.name = f.String("name");
    s.engine = f.String("engine");
    s.version = f.String("version");
    s.calibration = f.String("calibration");
    s.sources = f.String("sources", "");
    FATHOM_RETURN_IF_ERROR(f.status());
    if (s.name.empty()) return Status::InvalidArgument(where + ": field 'name': must not be empty");
    if (!e.contains("calibrated_on") || !e["calibrated_on"].is_array()) {
      return Status::InvalidArgument(
          where + ": field 'calibrated_on': missing (required array of MLPerf rounds)");
    }
    for (const Json& r : e["calibrated_on"]) {
      if (!r.is_string())
        return Status::InvalidArgument(where + ": field 'calibrated_on': must hold strings");
      s.calibrated_on.push_back(r.get<std::string>());
    }
    if (!e.contains("fitted_on") || !e["fitted_on"].is_object()) {
      return Status::InvalidArgument(
          where + ": field 'fitted_on': missing (required: {\"results\": file, \"rows\": N})");
    }
    JsonFields fitted(e["fitted_on"], where + ": fitted_on");
    s.fitted_results = fitted.String("results");
    s.fitted_rows = static_cast<int>(fitted.Int("rows"));
    FATHOM_RETURN_IF_ERROR(fitted.status());
    if (s.fitted_rows < 1) {
      return Status::InvalidArgument(where + ": fitted_on: field 'rows': " +
                                     std::to_string(s.fitted_rows) + " (must be >= 1)");
    }
    if (!e.contains("vendors") || !e["vendors"].is_array() || e["vendors"].empty() ||
        !std::all_of(e["vendors"].begin(), e["vendors"].end(),
                     [](const Json& v) { return v.is_string(); })) {
      return Status::InvalidArgument(
          where +
          ": field 'vendors': missing (required non-empty array of GPU vendors, e.g. "
          "[\"nvidia\"])");
    }
    for (const Json& v : e["vendors"]) s.vendors.push_back(v.get<std::string>());
    if (e.contains("search")) {
      JsonFields search(e["search"], where + ": search");
      s.search.attention_dp_balance = search.Bool("attention_dp_balance", true);
      s.search.async_scheduling = search.Bool("async_scheduling", false);
      s.search.prefill_first = search.Bool("prefill_first", false);
      const std::vector<int64_t> steps = search.IntList("scheduler_steps", {1});
      FATHOM_RETURN_IF_ERROR(search.status());
      s.search.scheduler_steps.clear();
      for (int64_t n : steps) {
        if (n < 1 || n > 64) {
          return Status::InvalidArgument(where + ": search: field 'scheduler_steps': " +
                                         std::to_string(n) + " (must be in [1, 64])");
        }
        s.search.scheduler_steps.push_back(static_cast<int>(n));
      }
      if (s.search.scheduler_steps.empty()) {
        return Status::InvalidArgument(where +
                                       ": search: field 'scheduler_steps': must not be empty");
      }
    }
    if (e.contains("cpp_runtime_model_types")) {
      const Json& types = e["cpp_runtime_model_types"];
      if (!types.is_array() ||
          !std::all_of(types.begin(), types.end(), [](const Json& t) { return t.is_string(); })) {
        return Status::InvalidArgument(
            where + ": field 'cpp_runtime_model_types': must be an array of model_type strings");
      }
      for (const Json& t : types) s.cpp_model_types.push_back(t.get<std::string>());
    }
    if (e.contains("features")) {
      if (!e["features"].is_object())
        return Status::InvalidArgument(where + ": field 'features': must be an object");
      s.features = OrderedJson::parse(e["features"].dump());
    }
    for (const Stack& earlier : out) {
      if (earlier.name == s.name)
        return Status::InvalidArgument(where + ": field 'name': \"" + s.name + "\" twice");
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
std::string Names(const std::vector<Stack>& stacks) {
  std::string names;
  for (const Stack& s : stacks) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}
}  // namespace

Result<Stack> FindStack(const std::vector<Stack>& stacks, const std::string& name,
                        const std::string& engine) {
  for (const Stack& s : stacks) {
    if (s.name != name) continue;
    if (!engine.empty() && s.engine != engine) {
      return Status::InvalidArgument("--stack = " + s.name + " is a " + s.engine +
                                     " stack, not --engine = " + EngineFlag(engine) + "'s");
    }
    return s;
  }
  return Status::InvalidArgument("--stack = \"" + name + "\": not a known stack (" + Names(stacks) +
                                 ")");
}

Result<std::string> EngineNamed(const std::string& flag) {
  if (flag == "trtllm") return std::string("TensorRT-LLM");
  if (flag == "vllm") return std::string("vLLM");
  if (flag == "sglang") return std::string("SGLang");
  return Status::InvalidArgument("--engine = \"" + flag + "\": must be trtllm, vllm or sglang");
}

std::string EngineFlag(const std::string& engine) {
  if (engine == "TensorRT-LLM") return "trtllm";
  std::string flag = engine;
  std::transform(flag.begin(), flag.end(), flag.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return flag;
}

Result<Stack> DefaultStack(const std::vector<Stack>& stacks, const std::string& engine,
                           const std::string& vendor) {
  for (auto it = stacks.rbegin(); it != stacks.rend(); ++it) {
    if ((engine.empty() || it->engine == engine) && it->RunsOn(vendor)) return *it;
  }
  if (engine.empty()) return stacks.back();
  std::string elsewhere;
  for (const Stack& s : stacks) {
    if (s.engine != engine) continue;
    std::string where;
    for (const auto& v : s.vendors) where += (where.empty() ? "" : ", ") + v;
    elsewhere += (elsewhere.empty() ? "" : "; ") + s.name + " runs on " + where;
  }
  const std::string flag = "--engine = " + EngineFlag(engine) + ": ";
  if (elsewhere.empty()) {
    return Status::InvalidArgument(flag + "no " + engine + " stack is calibrated yet (" +
                                   Names(stacks) +
                                   "); --json's launch commands still give its "
                                   "command for the deployment fathom chose");
  }
  return Status::InvalidArgument(flag + "no " + engine + " stack runs on " + vendor + " GPUs (" +
                                 elsewhere + "): give --stack to extrapolate to them");
}

std::vector<std::string> EnginesOn(const std::vector<Stack>& stacks, const std::string& vendor) {
  std::vector<std::string> out;
  for (auto it = stacks.rbegin(); it != stacks.rend(); ++it) {
    if (it->RunsOn(vendor) && std::find(out.begin(), out.end(), it->engine) == out.end())
      out.push_back(it->engine);
  }
  return out;
}

Result<Stack> StackForRound(const std::vector<Stack>& stacks, const std::string& round,
                            const std::string& engine) {
  for (const Stack& s : stacks) {
    if (s.engine == engine &&
        std::find(s.calibrated_on.begin(), s.calibrated_on.end(), round) != s.calibrated_on.end())
      return s;
  }
  return Status::InvalidArgument("no " + engine + " stack is calibrated on MLPerf " + round + " (" +
                                 Names(stacks) + "): give --stack or --calibration");
}

}  // namespace fathom::models
