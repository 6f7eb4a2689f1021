// printf-style formatting into std::string (GCC 12's library has no <format>).
#pragma once

#include <string>

namespace fathom {

std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "2,164,352": rounded to a whole number with thousands separators; past 1e15 in scientific form
// ("1.0e+300"), and "nan", "inf" as such, so no value makes a cell hundreds of characters wide.
std::string FormatCount(double value);

// "58.41 GB" (powers of 1000, as GPU datasheets count).
std::string HumanBytes(double bytes);

}  // namespace fathom
