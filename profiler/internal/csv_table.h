// A CSV table with a header line, read row by row in constant memory: the GEMM table and Vidur
// profile importers. Errors name the file and the line.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/line_reader.h"
#include "base/status.h"

namespace fathom::profiler {

class CsvTable {
 public:
  // Opens `path` in `env` (borrowed; it must outlive the call only) and reads the header.
  static Result<std::unique_ptr<CsvTable>> Open(const std::string& path, Env* env);
  CsvTable(std::unique_ptr<LineReader> lines, std::string path, std::string_view header);

  // Column names and their positions.
  const std::map<std::string, size_t, std::less<>>& columns() const { return column_; }
  bool Has(std::string_view name) const { return column_.count(name) > 0; }

  // Moves to the next row that is not blank; false at the end. A failed read, or a row with
  // another number of fields than the header, is an error.
  Result<bool> Next();
  // The current row's value in column `name`; empty where the table has no such column.
  std::string_view field(std::string_view name) const;
  // 1-based number of the current row's line.
  int64_t line_number() const { return lines_->line_number(); }

 private:
  std::unique_ptr<LineReader> lines_;
  std::string path_;
  std::map<std::string, size_t, std::less<>> column_;
  size_t header_fields_ = 0;
  std::vector<std::string_view> fields_;  // the current row's, into the LineReader's buffer
};

}  // namespace fathom::profiler
