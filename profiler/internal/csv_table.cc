#include "profiler/internal/csv_table.h"

#include <utility>

#include "base/csv.h"

namespace fathom::profiler {

Result<std::unique_ptr<CsvTable>> CsvTable::Open(const std::string& path, Env* env) {
  auto lines = LineReader::Open(path, env);
  if (!lines.ok()) return Status::NotFound(path + ": cannot open");
  std::string_view header;
  if (!(*lines)->Next(&header)) {
    FATHOM_RETURN_IF_ERROR((*lines)->status());
    return Status::InvalidArgument(path + ": empty file, no header");
  }
  return std::make_unique<CsvTable>(std::move(*lines), path, header);
}

CsvTable::CsvTable(std::unique_ptr<LineReader> lines, std::string path, std::string_view header)
    : lines_(std::move(lines)), path_(std::move(path)) {
  SplitCsv(header, &fields_);
  for (size_t i = 0; i < fields_.size(); ++i) column_.emplace(std::string(fields_[i]), i);
  header_fields_ = fields_.size();
  fields_.clear();
}

Result<bool> CsvTable::Next() {
  std::string_view line;
  while (lines_->Next(&line)) {
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    SplitCsv(line, &fields_);
    if (fields_.size() != header_fields_) {
      return Status::InvalidArgument(path_ + ":" + std::to_string(line_number()) + ": " +
                                     std::to_string(fields_.size()) + " fields, the header has " +
                                     std::to_string(header_fields_));
    }
    return true;
  }
  FATHOM_RETURN_IF_ERROR(lines_->status());
  return false;
}

std::string_view CsvTable::field(std::string_view name) const {
  auto it = column_.find(name);
  return it == column_.end() || it->second >= fields_.size() ? std::string_view()
                                                             : fields_[it->second];
}

}  // namespace fathom::profiler
