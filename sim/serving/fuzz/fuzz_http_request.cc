// libFuzzer target: feeds arbitrary bytes to fathom serve's HTTP/1.1 request parser, whole and
// cut in two as they might arrive, and checks what it reports against the input.
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "sim/serving/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom::sim;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr int64_t kMaxBody = 1024;
  for (const std::string_view in : {input.substr(0, size / 2), input}) {
    HttpRequest request;
    const HttpParse p = ParseHttpRequest(in, kMaxBody, &request);
    if (p.state == HttpParse::kComplete) {
      FATHOM_CHECK(p.consumed <= in.size());
      FATHOM_CHECK(request.body.size() <= static_cast<size_t>(kMaxBody));
      FATHOM_CHECK(!request.path.empty() && request.path[0] == '/');
    } else if (p.state == HttpParse::kIncomplete && p.head_read) {
      FATHOM_CHECK(request.body.empty());  // the head only, for the handler's Admit
      FATHOM_CHECK(!request.path.empty() && request.path[0] == '/');
    } else if (p.state == HttpParse::kBad) {
      FATHOM_CHECK(p.status == 400 || p.status == 413 || p.status == 431);
      FATHOM_CHECK(!p.error.empty());
    }
  }
  return 0;
}
