// Reading JSON configs with errors that name the file, the field, the value and the rule.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace fathom {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// JSON text that cannot throw: bytes that are not UTF-8 (a client's, echoed in an error message,
// or a name cut inside a character) are written as U+FFFD. For whatever goes over the wire.
template <typename AnyJson>  // Json or OrderedJson
std::string DumpUtf8(const AnyJson& j) {
  return j.dump(-1, ' ', false, AnyJson::error_handler_t::replace);
}

// Parses JSON text nested at most kMaxJsonDepth levels; errors name `source` and the byte where
// parsing stopped.
inline constexpr int kMaxJsonDepth = 256;
Result<Json> ParseJson(std::string_view text, const std::string& source);
// Parses a whole JSON file the same way.
Result<Json> ReadJsonFile(const std::string& path);

// Typed access to the fields of one JSON object. The first failure is kept in status(); later
// calls return defaults, so a loader reads every field and checks status() once.
class JsonFields {
 public:
  // `obj` is borrowed and must outlive this reader; `source` names it in errors ("b200.json").
  JsonFields(const Json& obj, std::string source);

  bool Has(std::string_view key) const;
  int64_t Int(std::string_view key);
  int64_t Int(std::string_view key, int64_t fallback);
  double Double(std::string_view key);
  double Double(std::string_view key, double fallback);
  std::string String(std::string_view key);
  std::string String(std::string_view key, std::string fallback);
  bool Bool(std::string_view key, bool fallback);
  // An array of integers, or `fallback` when the field is absent.
  std::vector<int64_t> IntList(std::string_view key, std::vector<int64_t> fallback);

  // Records a rule violation for `key` unless an earlier error is already recorded.
  void Fail(std::string_view key, const std::string& value, const std::string& rule);
  const Status& status() const { return status_; }
  const std::string& source() const { return source_; }

 private:
  const Json* Find(std::string_view key, const char* wanted_type);
  const Json& obj_;
  std::string source_;
  Status status_;
};

}  // namespace fathom
