// Reads a text file line by line in large chunks, in constant memory: the trace readers, and
// the profiler's and calibration's CSV tables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace fathom {

class LineReader {
 public:
  // Opens `path` in `env` (borrowed; it must outlive the open call only).
  static Result<std::unique_ptr<LineReader>> Open(const std::string& path,
                                                  Env* env = Env::Default());
  // Reads `file`; `name` stands for it in messages.
  LineReader(std::unique_ptr<SequentialFile> file, std::string name);

  // Next line without its '\n' (and '\r'), valid until the next call. False at the end of input
  // and on a read error: status() tells them apart.
  bool Next(std::string_view* line);
  // 1-based number of the line last returned.
  int64_t line_number() const { return line_number_; }
  // Ok, or the failed read or short read (a file cut short under the reader), naming the file.
  const Status& status() const { return status_; }

 private:
  bool Refill();
  std::unique_ptr<SequentialFile> file_;
  std::string name_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  uint64_t read_bytes_ = 0;
  bool eof_ = false;
  Status status_;
  int64_t line_number_ = 0;
};

}  // namespace fathom
