// Text rules shared by the HTTP/1.1 request parser and response reader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fathom::sim::http {

std::string Lower(std::string_view s);      // header names and tokens are case-insensitive
std::string_view Trim(std::string_view s);  // optional whitespace around a header value
// A non-negative number of at most 15 digits in `base` (10, or 16 for chunk sizes).
bool ParseNumber(std::string_view s, int base, int64_t* out);
// Whether a listening address is reachable only from this host (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(std::string_view host);

}  // namespace fathom::sim::http
