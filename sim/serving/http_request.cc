#include "sim/serving/http_request.h"

#include <algorithm>
#include <cctype>

#include "sim/serving/http_text.h"

namespace fathom::sim {
namespace {

using http::Lower;
using http::ParseNumber;
using http::Trim;

constexpr size_t kMaxHeaderBytes = 64 << 10;
constexpr size_t kMaxChunkLine = 1024;
// A body is parsed again as more of it arrives: many tiny chunks would cost every read a walk
// over all of them.
constexpr int kMaxChunks = 4096;

HttpParse Bad(int status, std::string error) {
  HttpParse p;
  p.state = HttpParse::kBad;
  p.status = status;
  p.error = std::move(error);
  return p;
}

// The chunked body starting at `at`: kComplete with `consumed` the offset past its end.
HttpParse ParseChunked(std::string_view in, size_t at, int64_t max_body_bytes, std::string* body) {
  body->clear();
  for (int chunks = 0;; ++chunks) {
    if (chunks > kMaxChunks) return Bad(400, "chunked body in more than 4096 chunks");
    const size_t eol = in.find("\r\n", at);
    if (eol == std::string_view::npos) {
      if (in.size() - at > kMaxChunkLine) return Bad(400, "malformed chunked body");
      return HttpParse{};
    }
    std::string_view line = in.substr(at, eol - at);
    line = Trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
    int64_t size = 0;
    if (!ParseNumber(line, 16, &size)) return Bad(400, "malformed chunked body");
    if (size > max_body_bytes - static_cast<int64_t>(body->size()))
      return Bad(413, "request body too large");
    at = eol + 2;
    if (size == 0) {
      // Trailer fields, if any, up to an empty line.
      for (;;) {
        const size_t end = in.find("\r\n", at);
        if (end == std::string_view::npos) {
          if (in.size() - at > kMaxHeaderBytes) return Bad(431, "request trailers too large");
          return HttpParse{};
        }
        const bool last = end == at;
        at = end + 2;
        if (last) break;
      }
      HttpParse p;
      p.state = HttpParse::kComplete;
      p.consumed = at;
      return p;
    }
    if (in.size() < at + static_cast<size_t>(size) + 2) return HttpParse{};
    body->append(in.substr(at, static_cast<size_t>(size)));
    at += static_cast<size_t>(size);
    if (in.substr(at, 2) != "\r\n") return Bad(400, "malformed chunked body");
    at += 2;
  }
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

HttpParse ParseHttpRequest(std::string_view in, int64_t max_body_bytes, HttpRequest* request) {
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    if (in.size() > kMaxHeaderBytes) return Bad(431, "request headers too large");
    return HttpParse{};
  }
  if (head_end > kMaxHeaderBytes) return Bad(431, "request headers too large");
  HttpRequest r;
  std::string_view head = in.substr(0, head_end);
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return Bad(400, "malformed request line");
  r.method = std::string(line.substr(0, sp1));
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (r.method.empty() || target.empty() || target[0] != '/' || version.rfind("HTTP/1.", 0) != 0)
    return Bad(400, "malformed request line");
  r.path = std::string(target.substr(0, target.find('?')));

  int64_t content_length = -1;
  bool chunked = false;
  std::string_view fields = line_end < head.size() ? head.substr(line_end + 2) : "";
  while (!fields.empty()) {
    const size_t end = fields.find("\r\n");
    const std::string_view field = fields.substr(0, end);
    fields = end == std::string_view::npos ? "" : fields.substr(end + 2);
    const size_t colon = field.find(':');
    if (colon == 0 || colon == std::string_view::npos || field[0] == ' ' || field[0] == '\t' ||
        Trim(field.substr(0, colon)).size() != colon) {
      return Bad(400, "malformed header line");
    }
    std::string name = Lower(field.substr(0, colon));
    const std::string_view value = Trim(field.substr(colon + 1));
    if (name == "content-length") {
      int64_t n = 0;
      if (!ParseNumber(value, 10, &n) || (content_length >= 0 && n != content_length))
        return Bad(400, "malformed Content-Length");
      content_length = n;
    } else if (name == "transfer-encoding") {
      if (Lower(value) != "chunked") return Bad(400, "unsupported Transfer-Encoding");
      chunked = true;
    }
    r.headers.emplace_back(std::move(name), std::string(value));
  }
  if (chunked && content_length >= 0)
    return Bad(400, "both Content-Length and Transfer-Encoding given");
  const std::string connection = Lower(r.Header("connection"));
  r.keep_alive = version == "HTTP/1.0" ? connection.find("keep-alive") != std::string::npos
                                       : connection.find("close") == std::string::npos;

  const size_t body_at = head_end + 4;
  HttpParse p;
  if (chunked) {
    p = ParseChunked(in, body_at, max_body_bytes, &r.body);
  } else {
    const int64_t length = std::max<int64_t>(content_length, 0);
    if (length > max_body_bytes) return Bad(413, "request body too large");
    if (in.size() - body_at >= static_cast<size_t>(length)) {
      r.body = std::string(in.substr(body_at, static_cast<size_t>(length)));
      p.state = HttpParse::kComplete;
      p.consumed = body_at + static_cast<size_t>(length);
    }
  }
  if (p.state == HttpParse::kBad) return p;
  if (p.state == HttpParse::kIncomplete) {
    p.expects_continue = Lower(r.Header("expect")) == "100-continue";
    r.body.clear();
  }
  p.head_read = true;
  *request = std::move(r);
  return p;
}

}  // namespace fathom::sim
