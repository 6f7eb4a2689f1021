// An HTTP/1.1 response read from a connection's bytes as they arrive, for loadgen's receiving
// thread: the status and headers, then the body as it comes, sent chunked, with a Content-Length
// or up to the connection's end.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fathom::sim {

class HttpResponseReader {
 public:
  // Takes received bytes; body bytes go to `on_body` as soon as they arrive, without the chunk
  // framing. False on a malformed response (error() says why).
  bool Feed(std::string_view data, const std::function<void(std::string_view)>& on_body);
  // The connection ended: true when that ends the response (a body sent up to the end).
  bool End();
  bool done() const { return phase_ == Phase::kDone; }
  int status() const { return status_; }
  bool keep_alive() const { return keep_alive_; }  // the connection may carry another request
  const std::string& error() const { return error_; }

 private:
  enum class Phase { kHead, kChunkSize, kChunkData, kChunkEnd, kTrailers, kLength, kToEnd, kDone };
  bool Fail(const std::string& why);
  bool ReadHead();  // from buffer_, once it holds the whole head

  Phase phase_ = Phase::kHead;
  std::string buffer_;     // received, not yet consumed
  int64_t remaining_ = 0;  // of the chunk or the body
  int status_ = 0;
  bool keep_alive_ = true;
  std::string error_;
};

}  // namespace fathom::sim
