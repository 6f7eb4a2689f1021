#include "sim/serving/http_response.h"

#include <algorithm>
#include <cctype>

#include "sim/serving/http_text.h"

namespace fathom::sim {
namespace {

using http::Lower;
using http::ParseNumber;
using http::Trim;

constexpr size_t kMaxHeadBytes = 64 << 10;

}  // namespace

bool HttpResponseReader::Fail(const std::string& why) {
  error_ = why;
  phase_ = Phase::kDone;
  keep_alive_ = false;
  return false;
}

bool HttpResponseReader::ReadHead() {
  const size_t end = buffer_.find("\r\n\r\n");
  const std::string_view head = std::string_view(buffer_).substr(0, end);
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  const std::string_view line = head.substr(0, line_end);
  int64_t status = 0;
  if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12 || line[8] != ' ' ||
      !ParseNumber(line.substr(9, 3), 10, &status)) {
    return Fail("malformed status line: " + std::string(line.substr(0, 100)));
  }
  status_ = static_cast<int>(status);
  keep_alive_ = line.rfind("HTTP/1.0", 0) != 0;
  bool chunked = false;
  int64_t length = -1;
  std::string_view fields = line_end < head.size() ? head.substr(line_end + 2) : "";
  while (!fields.empty()) {
    const size_t eol = fields.find("\r\n");
    const std::string_view field = fields.substr(0, eol);
    fields = eol == std::string_view::npos ? "" : fields.substr(eol + 2);
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos) return Fail("malformed header line");
    const std::string name = Lower(Trim(field.substr(0, colon)));
    const std::string value = Lower(Trim(field.substr(colon + 1)));
    if (name == "transfer-encoding") {
      chunked = value.find("chunked") != std::string::npos;
    } else if (name == "content-length") {
      if (!ParseNumber(value, 10, &length)) return Fail("malformed Content-Length");
    } else if (name == "connection") {
      if (value.find("close") != std::string::npos) keep_alive_ = false;
      if (value.find("keep-alive") != std::string::npos) keep_alive_ = true;
    }
  }
  buffer_.erase(0, end + 4);
  if (status_ / 100 == 1) return true;  // an interim response: the real one follows
  if (status_ == 204 || status_ == 304 || (!chunked && length == 0)) {
    phase_ = Phase::kDone;
  } else if (chunked) {
    phase_ = Phase::kChunkSize;
  } else if (length > 0) {
    remaining_ = length;
    phase_ = Phase::kLength;
  } else {
    keep_alive_ = false;
    phase_ = Phase::kToEnd;
  }
  return true;
}

bool HttpResponseReader::Feed(std::string_view data,
                              const std::function<void(std::string_view)>& on_body) {
  if (phase_ == Phase::kDone) return error_.empty();
  buffer_.append(data);
  for (;;) {
    switch (phase_) {
      case Phase::kHead:
        if (buffer_.find("\r\n\r\n") == std::string::npos) {
          return buffer_.size() <= kMaxHeadBytes || Fail("response headers too large");
        }
        if (!ReadHead()) return false;
        break;
      case Phase::kChunkSize: {
        const size_t eol = buffer_.find("\r\n");
        if (eol == std::string::npos) return buffer_.size() <= 1024 || Fail("malformed chunk");
        const std::string_view size = Trim(std::string_view(buffer_).substr(0, eol));
        if (!ParseNumber(size.substr(0, size.find(';')), 16, &remaining_))
          return Fail("malformed chunk size");
        buffer_.erase(0, eol + 2);
        phase_ = remaining_ == 0 ? Phase::kTrailers : Phase::kChunkData;
        break;
      }
      case Phase::kChunkData:
      case Phase::kLength: {
        const size_t n = std::min(buffer_.size(), static_cast<size_t>(remaining_));
        if (n == 0) return true;
        on_body(std::string_view(buffer_).substr(0, n));
        buffer_.erase(0, n);
        remaining_ -= static_cast<int64_t>(n);
        if (remaining_ == 0) phase_ = phase_ == Phase::kLength ? Phase::kDone : Phase::kChunkEnd;
        break;
      }
      case Phase::kChunkEnd:
        if (buffer_.size() < 2) return true;
        if (buffer_.compare(0, 2, "\r\n") != 0) return Fail("malformed chunk end");
        buffer_.erase(0, 2);
        phase_ = Phase::kChunkSize;
        break;
      case Phase::kTrailers: {
        const size_t eol = buffer_.find("\r\n");
        if (eol == std::string::npos) return buffer_.size() <= kMaxHeadBytes || Fail("trailers");
        buffer_.erase(0, eol + 2);
        if (eol == 0) phase_ = Phase::kDone;
        break;
      }
      case Phase::kToEnd:
        if (!buffer_.empty()) on_body(buffer_);
        buffer_.clear();
        return true;
      case Phase::kDone:
        return true;
    }
  }
}

bool HttpResponseReader::End() {
  if (phase_ == Phase::kToEnd) {
    phase_ = Phase::kDone;
    return true;
  }
  return phase_ == Phase::kDone && error_.empty();
}

}  // namespace fathom::sim
