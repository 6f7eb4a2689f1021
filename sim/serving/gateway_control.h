// What a controller needs of the gateway in front of its replicas, whether the gateway runs in the
// controller's process or in its own (`fathom gateway`, reached over HTTP with its control token):
// a gateway of its own outlives the controller, and keeps routing to the replicas if it dies.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/serving/gateway.h"

namespace fathom::sim {

class GatewayControl {
 public:
  virtual ~GatewayControl() = default;
  virtual Status AddReplica(const GatewayReplica& r) = 0;
  // With `requeue`, its requests without a first token go elsewhere at once (Gateway::
  // RemoveReplica).
  virtual Status RemoveReplica(int id, bool requeue = false) = 0;
  virtual Result<std::vector<GatewayReplica>> Replicas() = 0;
  virtual Result<GatewayWindow> TakeWindow() = 0;
  // The controller's part of the gateway's /metrics (Prometheus text), replacing the last.
  virtual Status SetMoreMetrics(const std::string& text) = 0;
  virtual std::string Address() const = 0;  // host:port, where clients send their requests
};

// The gateway in this process, listening on `host` (borrowed: it must outlive the control).
std::unique_ptr<GatewayControl> LocalGatewayControl(Gateway* gateway, const std::string& host);
// The gateway at `url` (http://HOST:PORT), its control endpoints reached with `token`; errors name
// the URL and what it answered. Checks that it answers.
Result<std::unique_ptr<GatewayControl>> ConnectGateway(const std::string& url,
                                                       const std::string& token);

}  // namespace fathom::sim
