// printf-style formatting into std::string (GCC 12's library has no <format>).
#pragma once

#include <string>

namespace fathom {

std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "58.41 GB" (powers of 1000, as GPU datasheets count).
std::string HumanBytes(double bytes);

}  // namespace fathom
