// Replies shared by fathom serve's endpoint and the supervisor's gateway: OpenAI-style error
// bodies and JSON responses. Internal to sim/serving (it includes cpp-httplib).
#pragma once

#include <httplib.h>

#include <string>

#include "base/json_fields.h"

namespace fathom::sim {

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

inline void Reply(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

}  // namespace fathom::sim
