// HTTP/1.1 requests read from a connection's bytes as they arrive, for fathom serve's event loop:
// the request line, headers, and a body sized by Content-Length or sent chunked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fathom::sim {

struct HttpRequest {
  std::string method;
  std::string path;                                          // without the query string
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only when asked
  // The first header named `name` (lower case), or empty.
  std::string_view Header(std::string_view name) const;
};

struct HttpParse {
  enum State { kIncomplete, kComplete, kBad } state = kIncomplete;
  size_t consumed = 0;            // kComplete: the request's bytes at the front of the input
  bool head_read = false;         // the request line and headers are whole (kComplete too)
  bool expects_continue = false;  // kIncomplete: headers read, the client awaits "100 Continue"
  int status = 0;                 // kBad: 400, 413 (body too large) or 431 (headers too large)
  std::string error;              // kBad: what was wrong
};

// Parses the request at the front of `input` into `request`: whole when kComplete; its method,
// path and headers (no body) when kIncomplete with head_read; untouched otherwise. Bodies over
// `max_body_bytes` are refused from their declared length, before they are read.
HttpParse ParseHttpRequest(std::string_view input, int64_t max_body_bytes, HttpRequest* request);

}  // namespace fathom::sim
