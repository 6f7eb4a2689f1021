// OpenAI-style error bodies, shared by fathom serve's endpoint and the gateway. Internal to
// sim/serving.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "base/json_fields.h"
#include "sim/serving/http_request.h"

namespace fathom::sim {

// The OpenAI endpoints that take a completion (POST).
inline bool IsCompletionPath(const std::string& path) {
  return path == "/v1/completions" || path == "/v1/chat/completions";
}

// An OpenAI-style error body.
inline std::string ErrorBody(const std::string& message, const std::string& type,
                             const std::string& param = "") {
  OrderedJson e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? OrderedJson() : OrderedJson(param);
  e["code"] = nullptr;
  OrderedJson j;
  j["error"] = e;
  return DumpUtf8(j);
}

// What a request's head for one of the OpenAI endpoints earns before its body is read: 401 for
// /v1/* without `api_key` (when set), 405 for the wrong method; nullopt when it may go on.
inline std::optional<std::pair<int, std::string>> RefuseOpenAiHead(const HttpRequest& head,
                                                                   const std::string& api_key) {
  const std::string& path = head.path;
  if (!api_key.empty() && path.rfind("/v1/", 0) == 0 &&
      head.Header("authorization") != "Bearer " + api_key) {
    return std::make_pair(401,
                          ErrorBody("a valid API key is required (Authorization: Bearer <key>)",
                                    "authentication_error"));
  }
  const bool post = IsCompletionPath(path);
  if (head.method != (post ? "POST" : "GET")) {
    return std::make_pair(
        405, ErrorBody(path + " takes " + (post ? "POST" : "GET"), "invalid_request_error"));
  }
  return std::nullopt;
}

}  // namespace fathom::sim
