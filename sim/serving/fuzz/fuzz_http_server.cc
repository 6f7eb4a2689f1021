// libFuzzer target: arbitrary bytes sent to a running fathom serve endpoint over loopback, as a
// raw request (first byte even) or as the JSON body of a completion (odd). Every answer must be
// HTTP/1.1 with a known status and, where it says JSON, a body that parses; and the server must
// still answer /health on a new connection afterwards. The server (Llama 2 70B on 2 H200s, the
// roofline's times, 1,000x real time) lives for the whole run.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include "base/check.h"
#include "base/json_fields.h"
#include "models/hardware.h"
#include "sim/deployment_config.h"
#include "sim/serving/live_engine.h"
#include "sim/serving/openai_server.h"
#include "sim/time_model.h"

namespace {

using namespace fathom;

sim::OpenAiServer* Server() {
  static sim::OpenAiServer* server = [] {
    sim::DeploymentConfig d;
    d.model = "llama2-70b";
    d.hardware = "h200";
    d.gpus = d.tp = 2;
    d.ep = d.attn_dp = 1;
    d.weights = d.kv = "fp8";
    auto catalog = models::HardwareCatalog::LoadBuiltin();
    FATHOM_CHECK(catalog.ok());
    auto resolved = sim::Resolve(d, *catalog, sim::RooflineFactory());
    FATHOM_CHECK(resolved.ok());
    auto* engine = new sim::LiveEngine(std::move(*resolved), 1000);
    sim::ServeOptions o;
    o.port = 0;
    o.served_model_name = "llama";
    o.max_model_len = 4096;
    o.read_timeout_s = 0.5;
    auto* s = new sim::OpenAiServer(engine, o);
    FATHOM_CHECK(s->Bind().ok());
    std::thread([s] { s->Serve(); }).detach();
    FATHOM_CHECK(s->WaitReady());
    return s;
  }();
  return server;
}

int Connect(int port) {
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FATHOM_CHECK(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return sock;
}

// What the server sends on `sock` until it closes or `wait_ms` pass without a byte.
std::string Receive(int sock, int wait_ms) {
  std::string got;
  char buffer[4096];
  pollfd p{sock, POLLIN, 0};
  while (poll(&p, 1, wait_ms) > 0) {
    const ssize_t n = recv(sock, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

// The first answer in `got`: a status line with a known status, and a JSON body that parses.
void CheckAnswer(const std::string& got) {
  if (got.empty()) return;  // closed without a word: a request cut by the half-close
  FATHOM_CHECK(got.rfind("HTTP/1.1 ", 0) == 0);
  const int status = std::stoi(got.substr(9, 3));
  FATHOM_CHECK(status == 100 || status == 200 || (status >= 400 && status <= 405) ||
               status == 413 || status == 431 || status == 500 || status == 503);
  const size_t head_end = got.find("\r\n\r\n");
  if (head_end == std::string::npos) return;  // the rest did not come in time
  const std::string head = got.substr(0, head_end);
  const size_t length_at = head.find("Content-Length: ");
  if (head.find("Content-Type: application/json") == std::string::npos ||
      length_at == std::string::npos)
    return;
  const size_t length = std::stoul(head.substr(length_at + 16));
  if (got.size() < head_end + 4 + length) return;
  FATHOM_CHECK(ParseJson(std::string_view(got).substr(head_end + 4, length), "answer").ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  sim::OpenAiServer* server = Server();
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string request;
  if (data[0] % 2 == 0) {
    request = std::string(bytes);
  } else {
    request =
        "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(bytes.size()) + "\r\n\r\n" + std::string(bytes);
  }
  const int sock = Connect(server->port());
  [[maybe_unused]] ssize_t sent = send(sock, request.data(), request.size(), MSG_NOSIGNAL);
  // No half-close: the server takes a client's end of sending as its leaving (as vLLM does).
  CheckAnswer(Receive(sock, 20));
  close(sock);  // a stream still running is aborted
  // Whatever it was sent, the server answers the next client.
  const int health = Connect(server->port());
  const std::string ask = "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n";
  FATHOM_CHECK(send(health, ask.data(), ask.size(), MSG_NOSIGNAL) ==
               static_cast<ssize_t>(ask.size()));
  const std::string answer = Receive(health, 2000);
  close(health);
  FATHOM_CHECK(answer.rfind("HTTP/1.1 200", 0) == 0);
  return 0;
}
