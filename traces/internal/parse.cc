#include "traces/internal/parse.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/csv.h"

namespace fathom::traces::internal {
namespace {

bool Digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

class JsonScanner {
 public:
  explicit JsonScanner(std::string_view s) : s_(s) {}
  void SkipWs() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n'))
      ++i_;
  }
  bool Eat(char c) {
    SkipWs();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    SkipWs();
    return i_ >= s_.size();
  }
  char Peek() {
    SkipWs();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  // After the opening quote; returns the raw contents.
  bool String(std::string_view* out) {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') ++i_;
      ++i_;
    }
    if (i_ >= s_.size()) return false;
    *out = s_.substr(start, i_ - start);
    ++i_;
    return true;
  }
  bool Number(std::string_view* out) {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == '+' || s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      ++i_;
    *out = s_.substr(start, i_ - start);
    return i_ > start;
  }
  bool Literal() {
    for (std::string_view lit : {"true", "false", "null"}) {
      if (s_.substr(i_, lit.size()) == lit) {
        i_ += lit.size();
        return true;
      }
    }
    return false;
  }
  // Skips any value (used for nested objects and arrays nobody asked for).
  bool SkipValue(int depth) {
    if (depth > 64) return false;
    const char c = Peek();
    std::string_view ignored;
    if (c == '"') {
      ++i_;
      return String(&ignored);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++i_;
      if (Eat(close)) return true;
      while (true) {
        if (c == '{') {
          if (!Eat('"') || !String(&ignored) || !Eat(':')) return false;
        }
        if (!SkipValue(depth + 1)) return false;
        if (Eat(',')) continue;
        return Eat(close);
      }
    }
    if (c == 't' || c == 'f' || c == 'n') return Literal();
    return Number(&ignored);
  }
  size_t pos() const { return i_; }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

bool ParseTimestamp(std::string_view s, double* seconds) {
  s = TrimField(s);
  if (ParseFiniteDouble(s, seconds)) return true;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (s.size() < 19 || !Digits(s, 0, 4, &y) || s[4] != '-' || !Digits(s, 5, 2, &mo) ||
      s[7] != '-' || !Digits(s, 8, 2, &d) || (s[10] != ' ' && s[10] != 'T') ||
      !Digits(s, 11, 2, &h) || s[13] != ':' || !Digits(s, 14, 2, &mi) || s[16] != ':' ||
      !Digits(s, 17, 2, &sec)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return false;
  double frac = 0;
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    double scale = 0.1;
    ++i;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      frac += (s[i] - '0') * scale;
      scale *= 0.1;
      ++i;
    }
    if (i == start) return false;
  }
  int offset_s = 0;
  if (i < s.size()) {
    if (s.substr(i) == "Z") {
      i = s.size();
    } else if ((s[i] == '+' || s[i] == '-') && s.size() == i + 6 && s[i + 3] == ':') {
      int oh = 0, om = 0;
      if (!Digits(s, i + 1, 2, &oh) || !Digits(s, i + 4, 2, &om)) return false;
      offset_s = (s[i] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
      i = s.size();
    } else {
      return false;
    }
  }
  *seconds =
      static_cast<double>(DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s) +
      frac;
  return true;
}

std::string ParseJsonLine(std::string_view line, const std::vector<std::string_view>& keys,
                          std::vector<JsonValue>* values, std::string_view array_key,
                          std::vector<uint64_t>* array) {
  values->assign(keys.size(), JsonValue{});
  if (array != nullptr) array->clear();
  JsonScanner js(line);
  if (!js.Eat('{')) return "not a JSON object";
  if (!js.Eat('}')) {
    while (true) {
      std::string_view key;
      if (!js.Eat('"') || !js.String(&key)) return "expected a quoted key";
      if (!js.Eat(':')) return "expected ':' after key \"" + std::string(key) + "\"";
      size_t slot = keys.size();
      for (size_t k = 0; k < keys.size(); ++k) {
        if (keys[k] == key) slot = k;
      }
      const char c = js.Peek();
      JsonValue v;
      if (c == '"') {
        js.Eat('"');
        if (!js.String(&v.text)) return "unterminated string";
        v.kind = JsonValue::kString;
      } else if (c == '[' && key == array_key && array != nullptr) {
        js.Eat('[');
        v.kind = JsonValue::kArray;
        if (!js.Eat(']')) {
          while (true) {
            std::string_view num;
            js.SkipWs();
            int64_t id = 0;
            if (!js.Number(&num) || !ParseNonNegativeInt(num, &id)) {
              return "\"" + std::string(array_key) + "\" must hold non-negative integers";
            }
            array->push_back(static_cast<uint64_t>(id));
            if (js.Eat(',')) continue;
            if (js.Eat(']')) break;
            return "unterminated array \"" + std::string(array_key) + "\"";
          }
        }
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        js.SkipWs();
        js.Number(&v.text);
        v.kind = JsonValue::kNumber;
      } else {
        if (!js.SkipValue(0)) return "malformed value for key \"" + std::string(key) + "\"";
        v.kind = JsonValue::kOther;
      }
      if (key == array_key && array != nullptr && v.kind != JsonValue::kArray) {
        return "\"" + std::string(array_key) + "\" must be an array of non-negative integers";
      }
      if (slot < keys.size()) (*values)[slot] = v;
      if (js.Eat(',')) continue;
      if (js.Eat('}')) break;
      return "expected ',' or '}' at byte " + std::to_string(js.pos());
    }
  }
  if (!js.AtEnd()) return "text after the closing '}'";
  return "";
}

}  // namespace fathom::traces::internal
