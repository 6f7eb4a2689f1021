#include "reports/table.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/format.h"

namespace fathom::reports {
namespace {

std::string CsvField(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string Pad(const std::string& s, size_t width, bool right) {
  const std::string fill(width > s.size() ? width - s.size() : 0, ' ');
  return right ? fill + s : s + fill;
}

}  // namespace

void Table::AddRow(std::vector<std::string> cells) {
  FATHOM_CHECK(cells.size() == columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Text() const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].title.size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool last = c + 1 == cells.size();
      std::string cell = Pad(cells[c], width[c], columns_[c].numeric);
      if (last && !columns_[c].numeric) cell = cells[c];  // no trailing spaces
      out += (c > 0 ? "  " : "") + cell;
    }
    return out + "\n";
  };
  std::vector<std::string> titles;
  for (const auto& col : columns_) titles.push_back(col.title);
  std::string out = line(titles);
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string Table::Markdown() const {
  auto cell = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '|') out += '\\';
      out += c == '\n' ? ' ' : c;
    }
    return out;
  };
  std::string out = "|";
  for (const auto& col : columns_) out += " " + cell(col.title) + " |";
  out += "\n|";
  for (const auto& col : columns_) out += col.numeric ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& row : rows_) {
    out += "|";
    for (const auto& c : row) out += " " + cell(c) + " |";
    out += "\n";
  }
  return out;
}

std::string Table::Csv() const {
  std::string out;
  for (size_t c = 0; c < columns_.size(); ++c)
    out += (c > 0 ? "," : "") + CsvField(columns_[c].title);
  out += "\n";
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) out += (c > 0 ? "," : "") + CsvField(row[c]);
    out += "\n";
  }
  return out;
}

std::string Table::Html() const {
  std::string out = "<table>\n<tr>";
  for (const auto& col : columns_) out += "<th>" + EscapeXml(col.title) + "</th>";
  out += "</tr>\n";
  for (const auto& row : rows_) {
    out += "<tr>";
    for (size_t c = 0; c < row.size(); ++c) {
      out += std::string(columns_[c].numeric ? "<td class=\"n\">" : "<td>") + EscapeXml(row[c]) +
             "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string EscapeXml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatFixed(double value, int digits) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::abs(value) >= 1e9) return StrFormat("%.1e", value);
  return StrFormat("%.*f", digits, value);
}

}  // namespace fathom::reports
