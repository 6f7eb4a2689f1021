// A table of text cells, rendered for a terminal, Markdown, CSV or HTML.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fathom::reports {

class Table {
 public:
  struct Column {
    std::string title;
    bool numeric = true;  // right-aligned in text and Markdown
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // Exactly one cell per column.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  std::string Text() const;      // columns padded to their widest cell, two spaces apart
  std::string Markdown() const;  // a pipe table; '|' in cells escaped
  std::string Csv() const;       // RFC 4180: fields with commas, quotes or newlines quoted
  std::string Html() const;      // a <table>, cells escaped

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Text safe inside HTML and SVG (XML) elements and attributes.
std::string EscapeXml(std::string_view s);

// `value` with `digits` decimals for a cell: "1234.5"; from 1e9 on in scientific form ("1.0e+300"),
// and "nan" or "inf" as such, so no value makes a cell more than about a dozen characters wide.
std::string FormatFixed(double value, int digits);

}  // namespace fathom::reports
