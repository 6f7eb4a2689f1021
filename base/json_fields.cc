#include "base/json_fields.h"

#include <cmath>
#include <cstdint>

#include "base/files.h"

namespace fathom {

Result<Json> ParseJson(std::string_view text, const std::string& source) {
  // The parser recurses per level: refuse deep nesting before it can exhaust the stack.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return Status::InvalidArgument(source + ": JSON nested deeper than " +
                                       std::to_string(kMaxJsonDepth) + " levels at byte " +
                                       std::to_string(i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return Status::InvalidArgument(source + ": malformed JSON at byte " + std::to_string(e.byte) +
                                   ": " + e.what());
  } catch (const Json::exception& e) {  // a number beyond a double's range (1E8256)
    return Status::InvalidArgument(source + ": malformed JSON: " + e.what());
  }
}

Result<Json> ReadJsonFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseJson(text, path);
}

JsonFields::JsonFields(const Json& obj, std::string source)
    : obj_(obj), source_(std::move(source)) {
  if (!obj_.is_object()) status_ = Status::InvalidArgument(source_ + ": expected a JSON object");
}

bool JsonFields::Has(std::string_view key) const {
  return obj_.is_object() && obj_.contains(key) && !obj_.at(std::string(key)).is_null();
}

void JsonFields::Fail(std::string_view key, const std::string& value, const std::string& rule) {
  if (!status_.ok()) return;
  std::string msg = source_ + ": field '" + std::string(key) + "'";
  if (!value.empty()) msg += " = " + value;
  status_ = Status::InvalidArgument(msg + ": " + rule);
}

const Json* JsonFields::Find(std::string_view key, const char* wanted_type) {
  if (!status_.ok()) return nullptr;
  if (!Has(key)) {
    Fail(key, "", std::string("missing (required ") + wanted_type + ")");
    return nullptr;
  }
  return &obj_.at(std::string(key));
}

int64_t JsonFields::Int(std::string_view key) {
  const Json* v = Find(key, "integer");
  if (v == nullptr) return 0;
  // Beyond int64 a conversion would wrap (2^64 - 1 read as -1) or be undefined (1e25).
  constexpr double kTwoTo63 = 9223372036854775808.0;
  const bool beyond = v->is_number_unsigned()
                          ? v->get<uint64_t>() > uint64_t{INT64_MAX}
                          : v->is_number_float() && !(std::fabs(v->get<double>()) < kTwoTo63);
  if (beyond) {
    Fail(key, v->dump(), "must be an integer within 64 bits (magnitude below 2^63)");
    return 0;
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float() && v->get<double>() == std::trunc(v->get<double>())) {
    return static_cast<int64_t>(v->get<double>());
  }
  Fail(key, v->dump(), "must be an integer");
  return 0;
}

int64_t JsonFields::Int(std::string_view key, int64_t fallback) {
  return Has(key) ? Int(key) : fallback;
}

std::vector<int64_t> JsonFields::IntList(std::string_view key, std::vector<int64_t> fallback) {
  if (!Has(key)) return fallback;
  const Json* a = Find(key, "array");
  if (a == nullptr) return fallback;
  if (!a->is_array()) {
    Fail(key, a->dump(), "expected an array of integers");
    return fallback;
  }
  std::vector<int64_t> out;
  for (const Json& x : *a) {
    if (!x.is_number_integer()) {
      Fail(key, x.dump(), "entries must be integers");
      return fallback;
    }
    out.push_back(x.get<int64_t>());
  }
  return out;
}

double JsonFields::Double(std::string_view key) {
  const Json* v = Find(key, "number");
  if (v == nullptr) return 0.0;
  if (v->is_number()) return v->get<double>();
  Fail(key, v->dump(), "must be a number");
  return 0.0;
}

double JsonFields::Double(std::string_view key, double fallback) {
  return Has(key) ? Double(key) : fallback;
}

std::string JsonFields::String(std::string_view key) {
  const Json* v = Find(key, "string");
  if (v == nullptr) return "";
  if (v->is_string()) return v->get<std::string>();
  Fail(key, v->dump(), "must be a string");
  return "";
}

std::string JsonFields::String(std::string_view key, std::string fallback) {
  return Has(key) ? String(key) : fallback;
}

bool JsonFields::Bool(std::string_view key, bool fallback) {
  if (!Has(key)) return fallback;
  const Json* v = Find(key, "boolean");
  if (v == nullptr) return fallback;
  if (v->is_boolean()) return v->get<bool>();
  Fail(key, v->dump(), "must be true or false");
  return fallback;
}

}  // namespace fathom
