#include "sim/serving/gateway_control.h"

#include <httplib.h>

#include <chrono>
#include <optional>

#include "base/format.h"
#include "base/json_fields.h"

namespace fathom::sim {
namespace {

class LocalControl : public GatewayControl {
 public:
  LocalControl(Gateway* gateway, std::string host) : gateway_(gateway), host_(std::move(host)) {}
  Status AddReplica(const GatewayReplica& r) override {
    gateway_->AddReplica(r);
    return Status::Ok();
  }
  Status RemoveReplica(int id, bool requeue) override {
    gateway_->RemoveReplica(id, requeue);
    return Status::Ok();
  }
  Result<std::vector<GatewayReplica>> Replicas() override { return gateway_->Replicas(); }
  Result<GatewayWindow> TakeWindow() override { return gateway_->TakeWindow(); }
  Status SetMoreMetrics(const std::string& text) override {
    gateway_->SetMoreMetrics(text);
    return Status::Ok();
  }
  std::string Address() const override { return host_ + ":" + std::to_string(gateway_->port()); }

 private:
  Gateway* gateway_;
  std::string host_;
};

class RemoteControl : public GatewayControl {
 public:
  RemoteControl(std::string url, std::string address, std::string token)
      : url_(std::move(url)), address_(std::move(address)), client_(url_) {
    client_.set_connection_timeout(std::chrono::seconds(2));
    client_.set_read_timeout(std::chrono::seconds(10));
    client_.set_bearer_token_auth(token);
  }
  Status AddReplica(const GatewayReplica& r) override {
    OrderedJson j;
    j["host"] = r.host;
    j["port"] = r.port;
    j["weight"] = r.weight;
    Result<Json> about = ParseJson(r.about, "about");
    j["about"] = about.ok() ? OrderedJson(*about) : OrderedJson::object();
    return Call("PUT", "/fathom/replicas/" + std::to_string(r.id), DumpUtf8(j), "application/json")
        .status();
  }
  Status RemoveReplica(int id, bool requeue) override {
    const std::string path = "/fathom/replicas/" + std::to_string(id);
    return (requeue ? Call("POST", path + "/requeue", "", "text/plain")
                    : Call("DELETE", path, "", ""))
        .status();
  }
  Result<std::vector<GatewayReplica>> Replicas() override {
    FATHOM_ASSIGN_OR_RETURN(std::string body, Call("GET", "/fathom/replicas", "", ""));
    return ParseReplicasJson(body, url_ + "/fathom/replicas");
  }
  Result<GatewayWindow> TakeWindow() override {
    FATHOM_ASSIGN_OR_RETURN(std::string body, Call("POST", "/fathom/window", "", "text/plain"));
    return ParseWindowJson(body, url_ + "/fathom/window");
  }
  Status SetMoreMetrics(const std::string& text) override {
    return Call("PUT", "/fathom/metrics", text, "text/plain").status();
  }
  std::string Address() const override { return address_; }

 private:
  // The body of a 200 answer; anything else is an error naming the URL and the answer.
  Result<std::string> Call(const std::string& method, const std::string& path,
                           const std::string& body, const std::string& type) {
    const std::string where = method + " " + url_ + path;
    httplib::Result r = method == "GET"      ? client_.Get(path.c_str())
                        : method == "DELETE" ? client_.Delete(path.c_str())
                        : method == "PUT"    ? client_.Put(path.c_str(), body, type.c_str())
                                             : client_.Post(path.c_str(), body, type.c_str());
    if (!r) {
      return Status::Unavailable(where + ": the gateway did not answer (" +
                                 httplib::to_string(r.error()) + ")");
    }
    if (r->status != 200) {
      return Status::Unavailable(StrFormat("%s: the gateway answered HTTP %d: %s", where.c_str(),
                                           r->status, r->body.substr(0, 300).c_str()));
    }
    return r->body;
  }

  std::string url_, address_;
  httplib::Client client_;
};

}  // namespace

std::unique_ptr<GatewayControl> LocalGatewayControl(Gateway* gateway, const std::string& host) {
  return std::make_unique<LocalControl>(gateway, host);
}

Result<std::unique_ptr<GatewayControl>> ConnectGateway(const std::string& url,
                                                       const std::string& token) {
  const std::string prefix = "http://";
  std::string address = url.rfind(prefix, 0) == 0 ? url.substr(prefix.size()) : "";
  while (!address.empty() && address.back() == '/') address.pop_back();
  const size_t colon = address.rfind(':');
  if (address.empty() || address.find('/') != std::string::npos || colon == std::string::npos ||
      colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument("--gateway-url = " + url.substr(0, 200) +
                                   ": must be http://HOST:PORT (fathom gateway's address)");
  }
  auto control = std::make_unique<RemoteControl>(prefix + address, address, token);
  FATHOM_RETURN_IF_ERROR(control->Replicas().status().WithContext("--gateway-url"));
  return std::unique_ptr<GatewayControl>(std::move(control));
}

}  // namespace fathom::sim
