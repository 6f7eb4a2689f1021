#include "sim/serving/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include "base/check.h"
#include "base/format.h"
#include "sim/serving/http_reply.h"

namespace fathom::sim {
namespace {

using Clock = HttpConnection::Clock;

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 504:
      return "Gateway Timeout";
    default:
      return status < 500 ? "Bad Request" : "Service Unavailable";
  }
}

// As many descriptors as the hard limit allows: each connection holds one, and the default soft
// limit (often 1,024) would refuse clients long before the connection limit.
void RaiseDescriptorLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  r.rlim_cur = r.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &r);
}

}  // namespace

HttpServer::HttpServer(HttpHandler* handler, HttpServerOptions options)
    : handler_(handler), options_(std::move(options)) {}

HttpServer::~HttpServer() {
  for (auto& [fd, c] : connections_) ::close(fd);
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

Status HttpServer::Bind() {
  const std::string where =
      options_.port == 0
          ? options_.host_flag + " " + options_.host
          : StrFormat("%s %s %s %d", options_.host_flag.c_str(), options_.host.c_str(),
                      options_.port_flag.c_str(), options_.port);
  RaiseDescriptorLimit();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options_.port);
  if (::getaddrinfo(options_.host.c_str(), service.c_str(), &hints, &found) != 0) {
    return Status::InvalidArgument(where + ": not an address of this machine");
  }
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    // The kernel caps the backlog at net.core.somaxconn (4,096 on current kernels).
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 65535) == 0) {
      listen_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return Status::InvalidArgument(
        where + (options_.port == 0 ? ": cannot listen on any port"
                                    : ": cannot listen there (in use, or not this machine's "
                                      "address)"));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return Status::Unavailable(std::string("cannot create the event loop: ") +
                               std::strerror(errno));
  }
  for (int fd : {listen_fd_, wake_fd_}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  }
  return Status::Ok();
}

void HttpServer::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_all_ = true;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);  // full only when unread
}

void HttpServer::Notify(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    notified_.push_back(id);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

HttpServerStats HttpServer::Stats() const {
  return HttpServerStats{open_.load(), refused_.load(), evicted_.load(), overflow_.load()};
}

void HttpServer::Serve() {
  FATHOM_CHECK(epoll_fd_ >= 0);  // Bind first
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    ready_ = true;
    ready_cv_.notify_all();
  }
  constexpr int kEvents = 256;
  epoll_event events[kEvents];
  Clock::time_point checked = Clock::now();
  std::vector<uint64_t> notified;
  while (!stop_.load()) {
    // Deadlines are checked every 100 ms, as the wait returns at least that often.
    const int n = ::epoll_wait(epoll_fd_, events, kEvents, 100);
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      if (fd == wake_fd_) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof count);
        woken = true;
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      HttpConnection& c = *it->second;
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) Read(c);
      if (!c.dead && (events[i].events & EPOLLOUT)) Flush(c);
      // What waited for the client to take the last output (sent by either).
      if (!c.dead && !c.pending() && c.answer) handler_->Advance(*this, c);
    }
    if (woken) {
      bool all;
      {
        std::lock_guard<std::mutex> lock(mu_);
        all = wake_all_;
        wake_all_ = false;
        notified.swap(notified_);
      }
      if (all) {
        for (auto& [fd, c] : connections_) {
          if (c->answer && !c->dead && !c->pending()) handler_->Advance(*this, *c);
        }
      } else {
        for (const uint64_t id : notified) {
          auto at = fd_by_id_.find(id);
          if (at == fd_by_id_.end()) continue;
          HttpConnection& c = *connections_[at->second];
          if (c.answer && !c.dead && !c.pending()) handler_->Advance(*this, c);
        }
      }
      notified.clear();
    }
    if (Clock::now() - checked >= std::chrono::milliseconds(100)) {
      CheckDeadlines();
      checked = Clock::now();
    }
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->second->dead)
        it = Close(it);
      else
        ++it;
    }
  }
  for (auto it = connections_.begin(); it != connections_.end();) it = Close(it);
}

HttpServer::Connections::iterator HttpServer::Close(Connections::iterator it) {
  HttpConnection& c = *it->second;
  if (c.answer) handler_->Abort(c);
  buffered_ -= static_cast<int64_t>(c.in.size());
  fd_by_id_.erase(c.id);
  ::close(it->first);
  --open_;
  if (!accepting_) SetAccepting(true);  // a descriptor is free again
  return connections_.erase(it);
}

void HttpServer::SetAccepting(bool on) {
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, listen_fd_, &e);
  accepting_ = on;
}

bool HttpServer::Evict() {
  // Idle ones first, the longest idle; then the slowest to send its request.
  auto victim = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    const HttpConnection& c = *it->second;
    if (c.dead || c.answer || c.pending()) continue;
    if (victim == connections_.end()) {
      victim = it;
      continue;
    }
    const HttpConnection& v = *victim->second;
    if (c.in.empty() != v.in.empty() ? c.in.empty() : c.idle_since < v.idle_since) victim = it;
  }
  if (victim == connections_.end()) return false;
  Close(victim);
  ++evicted_;
  return true;
}

void HttpServer::Accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: an idle connection makes room, or the listening socket rests
        // until one closes (it would wake the loop for nothing).
        if (Evict()) continue;
        SetAccepting(false);
      }
      return;
    }
    if (connections_.size() >= static_cast<size_t>(options_.max_connections) && !Evict()) {
      const std::string body = ErrorBody("too many connections", "service_unavailable");
      const std::string reply =
          StrFormat(
              "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
              "Content-Length: %zu\r\nConnection: close\r\n\r\n",
              body.size()) +
          body;
      [[maybe_unused]] ssize_t n = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(fd);
      ++refused_;
      continue;
    }
    const int on = 1;
    // Each event leaves at once (no Nagle wait on the client's delayed ACK).
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    // A fixed send buffer: a client that stops reading holds this much of the kernel's memory
    // (doubled by it) and what it is sent waits for it here; autotuned, it would grow to MiBs.
    const int send_buffer_bytes = 64 << 10;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_buffer_bytes, sizeof send_buffer_bytes);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<HttpConnection>();
    c->fd = fd;
    c->id = next_id_++;
    c->idle_since = Clock::now();
    fd_by_id_[c->id] = fd;
    connections_[fd] = std::move(c);
    ++open_;
  }
}

void HttpServer::Read(HttpConnection& c) {
  char buffer[16 << 10];
  if (c.lingering) {
    for (ssize_t n; (n = ::recv(c.fd, buffer, sizeof buffer, 0)) != 0;) {
      if (n < 0 && errno != EINTR) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
        return;
      }
    }
    c.dead = true;  // the client closed too
    return;
  }
  const size_t before = c.in.size();
  for (;;) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      c.in.append(buffer, static_cast<size_t>(n));
      // Bytes of a next request wait while one is answered (or a refusal is sent); beyond what a
      // request may take, with its headers and chunk framing, they are abuse.
      if (c.in.size() > 2 * static_cast<size_t>(options_.max_body_bytes) + (128 << 10)) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;  // the client left (or the connection broke): its request is aborted
    break;
  }
  buffered_ += static_cast<int64_t>(c.in.size() - before);
  if (c.dead) return;
  if (c.in.size() > 2 * static_cast<size_t>(options_.max_body_bytes) + (128 << 10)) {
    c.dead = true;
    return;
  }
  if (buffered_ > options_.max_buffered_bytes && !c.close_after) {
    // Memory is shared: the connection that would take more than is left is refused, not the
    // server.
    ++overflow_;
    buffered_ -= static_cast<int64_t>(c.in.size());
    c.in.clear();
    c.close_after = true;
    if (!c.answer) {
      Reply(c, 503, ErrorBody("the server holds too many requests' bytes", "service_unavailable"));
      Flush(c);
    }
    return;
  }
  HandleRequests(c);
}

void HttpServer::HandleRequests(HttpConnection& c) {
  while (!c.answer && !c.close_after && !c.in.empty()) {
    HttpRequest request;
    const HttpParse p = ParseHttpRequest(c.in, options_.max_body_bytes, &request);
    if (p.state == HttpParse::kBad) {
      c.close_after = true;
      Reply(c, p.status, ErrorBody(p.error, "invalid_request_error"));
      break;
    }
    std::optional<std::pair<int, std::string>> refusal;
    if (p.head_read && !c.admitted) {
      c.admitted = true;
      refusal = handler_->Admit(request);
      if (refusal && p.state == HttpParse::kIncomplete) {
        // Refused from its head: its body is not read, and the connection closes.
        c.close_after = true;
        buffered_ -= static_cast<int64_t>(c.in.size());
        c.in.clear();
        Reply(c, refusal->first, refusal->second);
        break;
      }
    }
    if (p.state == HttpParse::kIncomplete) {
      if (p.expects_continue && !c.continue_sent) {
        c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        c.continue_sent = true;
      }
      break;
    }
    c.in.erase(0, p.consumed);
    buffered_ -= static_cast<int64_t>(p.consumed);
    c.continue_sent = false;
    c.admitted = false;
    if (!request.keep_alive) c.close_after = true;
    if (refusal) {  // refused, but whole: the connection serves on
      Reply(c, refusal->first, refusal->second);
      continue;
    }
    try {
      handler_->Handle(*this, c, request);
    } catch (const std::exception& e) {  // one request's fault is its own: answer it, serve on
      if (c.answer) handler_->Abort(c);
      c.answer.reset();
      c.close_after = true;
      Reply(c, 500, ErrorBody(std::string("internal error: ") + e.what(), "internal_error"));
    }
  }
  Flush(c);
}

void HttpServer::Reply(HttpConnection& c, int status, const std::string& body,
                       const char* content_type) {
  c.out += StrFormat("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status,
                     Reason(status), content_type, body.size(),
                     c.close_after ? "Connection: close\r\n" : "");
  c.out += body;
  c.idle_since = Clock::now();
  if (c.out_at == 0) c.wrote_at = c.idle_since;  // the write timeout starts with the reply
}

void HttpServer::StartStream(HttpConnection& c, const char* content_type) {
  c.out += StrFormat(
      "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n"
      "Transfer-Encoding: chunked\r\n%s\r\n",
      content_type, c.close_after ? "Connection: close\r\n" : "");
}

void HttpServer::AppendChunk(HttpConnection& c, const std::string& data) {
  if (data.empty()) return;  // an empty chunk would end the stream
  c.out += StrFormat("%zx\r\n", data.size());
  c.out += data;
  c.out += "\r\n";
  c.wrote_at = Clock::now();
}

void HttpServer::SendChunk(HttpConnection& c, const std::string& data) {
  AppendChunk(c, data);
  Flush(c);
}

void HttpServer::EndStream(HttpConnection& c, const std::string& data) {
  AppendChunk(c, data);
  c.out += "0\r\n\r\n";
  Finish(c);
}

void HttpServer::Finish(HttpConnection& c) {
  c.answer.reset();
  c.idle_since = Clock::now();
  if (c.out_at == 0) c.wrote_at = c.idle_since;
  HandleRequests(c);
}

void HttpServer::Flush(HttpConnection& c) {
  while (c.pending()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_at += static_cast<size_t>(n);
      c.wrote_at = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;
    return;
  }
  if (!c.pending()) {
    c.out.clear();
    c.out_at = 0;
    if (c.close_after && !c.answer) {
      ::shutdown(c.fd, SHUT_WR);
      buffered_ -= static_cast<int64_t>(c.in.size());
      c.in.clear();
      c.lingering = true;
      c.linger_until = Clock::now() + std::chrono::seconds(2);
      return;
    }
  }
  if (c.pending() != c.writable_wait) {
    c.writable_wait = c.pending();
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP | (c.writable_wait ? EPOLLOUT : 0u);
    e.data.fd = c.fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &e);
  }
}

void HttpServer::CheckDeadlines() {
  const auto now = Clock::now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.read_timeout_s));
  for (auto& [fd, c] : connections_) {
    if (c->dead) continue;
    if (c->lingering) {
      if (now > c->linger_until) c->dead = true;
      continue;
    }
    if (c->pending()) {
      if (now - c->wrote_at > timeout) c->dead = true;  // the client stopped reading
    } else if (!c->answer && now - c->idle_since > timeout) {
      if (c->in.empty() || c->close_after) {
        c->dead = true;  // idle between requests
      } else {
        c->close_after = true;
        Reply(*c, 400,
              ErrorBody("the request was not received within the read timeout",
                        "invalid_request_error"));
        Flush(*c);
      }
    }
  }
}

bool HttpServer::WaitReady() {
  std::unique_lock<std::mutex> lock(mu_);
  ready_cv_.wait(lock, [this] { return ready_ || stopped_; });
  return ready_ && !stopped_;
}

void HttpServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    ready_cv_.notify_all();
  }
  stop_ = true;
  if (wake_fd_ >= 0) Wake();
}

}  // namespace fathom::sim
