#include "base/prometheus.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "base/format.h"

namespace fathom {
namespace {

bool NameStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool NameChar(char c) { return NameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

Result<double> ParseValue(std::string_view s) {
  if (s == "+Inf" || s == "Inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  const std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size())
    return Status::InvalidArgument("expected a number, got '" + text + "'");
  return v;
}

// One sample line: name{labels} value [timestamp].
Result<std::pair<std::string, MetricSample>> ParseLine(std::string_view line) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  };
  if (!NameStart(line[i])) return Status::InvalidArgument("expected a metric name");
  const size_t name_start = i;
  while (i < line.size() && NameChar(line[i])) ++i;
  std::string name(line.substr(name_start, i - name_start));
  MetricSample sample;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      skip_space();
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t key_start = i;
      while (i < line.size() && NameChar(line[i])) ++i;
      if (i == key_start) return Status::InvalidArgument("expected a label name or '}'");
      std::string key(line.substr(key_start, i - key_start));
      if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return Status::InvalidArgument("label " + key + ": expected =\"value\"");
      }
      i += 2;
      std::string value;
      for (;; ++i) {
        if (i >= line.size())
          return Status::InvalidArgument("label " + key + ": unterminated value");
        if (line[i] == '"') break;
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
      }
      ++i;
      sample.labels[key] = value;
      skip_space();
      if (i < line.size() && line[i] == ',') ++i;
    }
  }
  skip_space();
  size_t value_end = i;
  while (value_end < line.size() && line[value_end] != ' ' && line[value_end] != '\t') ++value_end;
  if (value_end == i) return Status::InvalidArgument("metric " + name + ": expected a value");
  FATHOM_ASSIGN_OR_RETURN(sample.value, ParseValue(line.substr(i, value_end - i)));
  return std::make_pair(std::move(name), std::move(sample));
}

}  // namespace

Result<Metrics> ParsePrometheusText(std::string_view text, const std::string& source) {
  Metrics m;
  size_t start = 0;
  for (int64_t line_no = 1; start < text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    auto parsed = ParseLine(line.substr(first));
    if (!parsed.ok()) {
      return Status::InvalidArgument(source + " line " + std::to_string(line_no) + ": " +
                                     parsed.status().message());
    }
    m[parsed->first].push_back(std::move(parsed->second));
  }
  return m;
}

std::optional<Histogram> FindHistogram(const Metrics& m, const std::string& name) {
  auto it = m.find(name + "_bucket");
  if (it == m.end()) return std::nullopt;
  std::map<double, double> by_bound;  // summed over series
  for (const MetricSample& s : it->second) {
    auto le = s.labels.find("le");
    if (le == s.labels.end()) continue;
    auto bound = ParseValue(le->second);
    if (bound.ok() && !std::isnan(*bound)) by_bound[*bound] += s.value;  // NaN has no order
  }
  Histogram h;
  h.buckets.assign(by_bound.begin(), by_bound.end());
  if (!h.buckets.empty()) h.count = h.buckets.back().second;
  return h;
}

Histogram Delta(const Histogram& now, const std::optional<Histogram>& before) {
  if (!before || before->count > now.count || before->buckets.size() != now.buckets.size())
    return now;
  Histogram d = now;
  for (size_t i = 0; i < d.buckets.size(); ++i) d.buckets[i].second -= before->buckets[i].second;
  d.count = now.count - before->count;
  return d;
}

double Quantile(const Histogram& h, double q) {
  if (h.count <= 0 || h.buckets.empty()) return 0;
  const double rank = q * h.count;
  double lower = 0, previous = 0;
  for (const auto& [bound, cumulative] : h.buckets) {
    if (cumulative >= rank && cumulative > previous) {
      if (!std::isfinite(bound)) return lower;
      return lower + (bound - lower) * (rank - previous) / (cumulative - previous);
    }
    previous = cumulative;
    if (std::isfinite(bound)) lower = bound;
  }
  return lower;
}

void AppendMetric(std::string* out, const std::string& name, const std::string& type,
                  const std::string& help,
                  const std::vector<std::pair<std::string, double>>& samples) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  for (const auto& [labels, v] : samples) {
    *out += labels.empty() ? name : name + "{" + labels + "}";
    *out += std::abs(v) < 1e15 && v == std::floor(v) ? StrFormat(" %.0f\n", v)
                                                     : StrFormat(" %.9g\n", v);
  }
}

}  // namespace fathom
