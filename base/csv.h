// CSV fields and the numbers in them, as the trace readers and the profiler's table import read
// them. Each parser returns false on bad input and never reads past the view.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace fathom {

// Without surrounding spaces, tabs and one pair of double quotes.
std::string_view TrimField(std::string_view s);

// Splits a CSV line on commas (no embedded commas in the supported formats), each field
// trimmed. `fields` is reused.
void SplitCsv(std::string_view line, std::vector<std::string_view>* fields);

bool ParseNonNegativeInt(std::string_view s,
                         int64_t* out);  // "12", and "12.0" as some exporters write
bool ParseFiniteDouble(std::string_view s, double* out);

}  // namespace fathom
