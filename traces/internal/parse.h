// Field parsers shared by the trace readers (internal to traces/; CSV fields and plain numbers
// are in base/csv.h). Each returns false on bad input and never reads past the view.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::traces::internal {

// "2023-11-16 18:17:03.9799600" with an optional "+00:00" or "Z" suffix (UTC), or a plain
// number of seconds. Seconds since 1970-01-01.
bool ParseTimestamp(std::string_view s, double* seconds);

// A flat JSON object: the values of the keys a reader asks for.
struct JsonValue {
  enum Kind { kMissing, kNumber, kString, kArray, kOther } kind = kMissing;
  std::string_view text;  // number or string contents, as written
};
// Parses one JSON object on a line. For each key in `keys`, fills `values` (same order); arrays
// of non-negative integers under `array_key` go to `array`. Returns an error description, or ""
// when the line is a well-formed object.
std::string ParseJsonLine(std::string_view line, const std::vector<std::string_view>& keys,
                          std::vector<JsonValue>* values, std::string_view array_key,
                          std::vector<uint64_t>* array);

}  // namespace fathom::traces::internal
