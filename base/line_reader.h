// Reads a text file line by line in large chunks, in constant memory: the trace readers, and
// the profiler's and calibration's CSV tables.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace fathom {

class LineReader {
 public:
  // Takes ownership of `file` (closed on destruction).
  explicit LineReader(std::FILE* file);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Next line without its '\n' (and '\r'), valid until the next call. False at end of input.
  bool Next(std::string_view* line);
  // 1-based number of the line last returned.
  int64_t line_number() const { return line_number_; }
  bool io_error() const { return io_error_; }

 private:
  bool Refill();
  std::FILE* file_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  bool io_error_ = false;
  int64_t line_number_ = 0;
};

}  // namespace fathom
