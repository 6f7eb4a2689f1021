#include "base/csv.h"

#include <charconv>
#include <cmath>

namespace fathom {

std::string_view TrimField(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

bool ParseNonNegativeInt(std::string_view s, int64_t* out) {
  s = TrimField(s);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  if (ec != std::errc() || *out < 0) return false;
  if (ptr == s.data() + s.size()) return true;
  // Accept "12.0" as written by some exporters, but not "12.5".
  double d = 0;
  if (!ParseFiniteDouble(s, &d) || d < 0 || d != std::floor(d) || d > 9e18) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

bool ParseFiniteDouble(std::string_view s, double* out) {
  s = TrimField(s);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*out);
}

void SplitCsv(std::string_view line, std::vector<std::string_view>* fields) {
  fields->clear();
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields->push_back(TrimField(line.substr(start)));
      return;
    }
    fields->push_back(TrimField(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

}  // namespace fathom
