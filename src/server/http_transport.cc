#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "server/api_error.h"

namespace ferrite {

namespace {

using Clock = std::chrono::steady_clock;

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

bool is_token_char(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

// Set by a worker's stream when a chunked body ran past the body limit; read
// by the error handler on the same thread (see body_over_limit()).
thread_local bool t_body_over_limit = false;

int ms_until(Clock::time_point t) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(d, 0, 1000));
}

}  // namespace

// One client connection.
struct HttpTransport::Conn {
  enum class State { kHead, kBody, kIdle, kClosing };
  int fd = -1;
  std::string buf;  // received, not yet consumed
  State state = State::kHead;
  Clock::time_point deadline;
  bool got_bytes = false;  // any byte of the current request
  size_t head_len = 0;     // bytes of the head, once complete
  size_t body_len = 0;     // Content-Length
  bool chunked = false;
  int requests = 0;
  std::string remote_ip;
  int remote_port = 0;
};

// httplib's view of a connection during one request: the buffered bytes
// first, then the socket (a chunked body), under the body deadline.
class HttpTransport::ConnStream : public httplib::Stream {
 public:
  ConnStream(Conn& c, const TransportOptions& o, Clock::time_point read_deadline)
      : c_(c), o_(o), read_deadline_(read_deadline) {}

  bool is_readable() const override { return pos_ < c_.buf.size() || wait(POLLIN, false); }
  bool is_writable() const override { return wait(POLLOUT, true); }

  ssize_t read(char* ptr, size_t size) override {
    ssize_t n;
    if (pos_ < c_.buf.size()) {
      n = static_cast<ssize_t>(std::min(size, c_.buf.size() - pos_));
      std::memcpy(ptr, c_.buf.data() + pos_, static_cast<size_t>(n));
    } else {
      // Only a chunked body is read from the socket here.
      if (!wait(POLLIN, false)) return -1;
      n = ::recv(c_.fd, ptr, size, 0);
      if (n > 0) consumed_from_socket_ += static_cast<size_t>(n);
    }
    if (n <= 0) return n;
    // The bytes of a chunked body pass a chunk-framing counter: the decoded
    // size is held to the body limit (httplib 0.11 does not), and the read
    // fails past it; the error handler answers 413.
    const size_t start = offset_;
    offset_ += static_cast<size_t>(n);
    if (start < c_.buf.size()) pos_ = offset_;  // bytes taken from the buffer
    if (c_.chunked && offset_ > c_.head_len) {
      size_t skip = c_.head_len > start ? c_.head_len - start : 0;
      if (!count_chunked(ptr + skip, static_cast<size_t>(n) - skip)) {
        t_body_over_limit = true;
        return -1;
      }
    }
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!wait(POLLOUT, true)) return -1;
    return ::send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.remote_ip;
    port = c_.remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    ip.clear();
    port = 0;
    if (getsockname(c_.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv,
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  socket_t socket() const override { return c_.fd; }

  size_t consumed() const { return pos_; }
  bool read_from_socket() const { return consumed_from_socket_ > 0; }

 private:
  // Waits for the socket to be ready: writes under the write timeout, reads
  // under the request's deadline.
  bool wait(short events, bool for_write) const {
    Clock::time_point until =
        for_write ? Clock::now() + o_.write_timeout : read_deadline_;
    for (;;) {
      pollfd p{c_.fd, events, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() < 0) return false;
      int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 60000)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (r == 0 && Clock::now() < until) continue;
        return false;
      }
      if (p.revents & (POLLERR | POLLNVAL)) return false;
      if (for_write && (p.revents & POLLHUP)) return false;
      return (p.revents & (events | POLLHUP)) != 0;
    }
  }

  Conn& c_;
  const TransportOptions& o_;
  Clock::time_point read_deadline_;
  // Follows RFC 9112 7.1 chunk framing over the body's bytes and adds up
  // the chunk data; false once it passes max_body_bytes (or the framing is
  // absurd: a size line over 1 KiB or a size that overflows).
  bool count_chunked(const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char ch = p[i];
      switch (chunk_state_) {
        case ChunkState::kSize:
          if (ch == '\n') {
            chunk_state_ = chunk_left_ == 0 ? ChunkState::kTrailer : ChunkState::kData;
            if (chunk_left_ > o_.max_body_bytes || decoded_ > o_.max_body_bytes - chunk_left_)
              return false;
            decoded_ += chunk_left_;
            size_line_ = 0;
          } else if (++size_line_ > 1024) {
            return false;
          } else if (!in_extension_) {
            int v = std::isxdigit(static_cast<unsigned char>(ch))
                        ? (std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                                                                        : (ch | 0x20) - 'a' + 10)
                        : -1;
            if (v >= 0) {
              if (chunk_left_ > (SIZE_MAX >> 4)) return false;
              chunk_left_ = chunk_left_ * 16 + static_cast<size_t>(v);
            } else if (ch == ';') {
              in_extension_ = true;
            }
          }
          break;
        case ChunkState::kData: {
          size_t take = std::min(chunk_left_, n - i);
          chunk_left_ -= take;
          i += take - 1;
          if (chunk_left_ == 0) chunk_state_ = ChunkState::kDataEnd;
          break;
        }
        case ChunkState::kDataEnd:
          if (ch == '\n') {
            chunk_state_ = ChunkState::kSize;
            in_extension_ = false;
          }
          break;
        case ChunkState::kTrailer:
          break;  // trailers: httplib bounds them as headers
      }
    }
    return true;
  }

  enum class ChunkState { kSize, kData, kDataEnd, kTrailer };
  ChunkState chunk_state_ = ChunkState::kSize;
  size_t chunk_left_ = 0;
  size_t decoded_ = 0;
  size_t size_line_ = 0;
  bool in_extension_ = false;
  size_t pos_ = 0;     // bytes of c_.buf consumed
  size_t offset_ = 0;  // bytes of the connection's stream consumed (buffer + socket)
  size_t consumed_from_socket_ = 0;
};

HttpTransport::HttpTransport(TransportOptions options) : options_(std::move(options)) {
  // httplib writes these into its Keep-Alive response header.
  set_keep_alive_timeout(std::max<time_t>(1, options_.keep_alive_timeout.count() / 1000));
  set_keep_alive_max_count(static_cast<size_t>(options_.max_requests_per_connection));
  set_payload_max_length(options_.max_body_bytes);
}

HttpTransport::~HttpTransport() {
  stop();
  svr_sock_ = INVALID_SOCKET;  // ours to close, not httplib's
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]})
    if (fd >= 0) ::close(fd);
}

Status HttpTransport::bind() {
  if (::pipe(wake_fds_) != 0) return unavailable("cannot create the poller's wake pipe");
  set_nonblocking(wake_fds_[0]);
  set_nonblocking(wake_fds_[1]);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(options_.port);
  const char* host = options_.host.empty() ? nullptr : options_.host.c_str();
  if (int rc = getaddrinfo(host, service.c_str(), &hints, &res); rc != 0)
    return invalid_argument(
        fmt::format("cannot resolve --host '{}': {}", options_.host, gai_strerror(rc)));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR lets a restarted server bind over TIME_WAIT connections;
    // no SO_REUSEPORT, so a second server on the same port fails to bind
    // instead of silently sharing the port.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::listen(fd, options_.listen_backlog) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0)
    return unavailable(fmt::format("cannot listen on {}:{}: {}{}", options_.host, options_.port,
                                   last_error,
                                   last_error.find("in use") != std::string::npos
                                       ? " (another server is using this port; pick another "
                                         "with --port)"
                                       : ""));
  set_nonblocking(listen_fd_);
  // httplib's chunked writers stop when its listening socket is invalid
  // ("shutting down"); it is ours, and stays open until the destructor.
  svr_sock_ = listen_fd_;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return Status::ok();
}

void HttpTransport::wake() {
  char b = 1;
  if (wake_fds_[1] >= 0) {
    ssize_t n = ::write(wake_fds_[1], &b, 1);
    (void)n;
  }
}

Status HttpTransport::serve() {
  if (listen_fd_ < 0) return internal_error("serve() before bind()");
  running_ = true;
  for (int i = 0; i < std::max(1, options_.workers); ++i)
    workers_.emplace_back([this] { worker_loop(); });
  poll_loop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  for (auto& c : conns_) close_conn(c);
  conns_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : ready_) close_conn(c);
  for (auto& c : returned_) close_conn(c);
  ready_.clear();
  returned_.clear();
  return Status::ok();
}

void HttpTransport::stop_accepting() {
  accepting_ = false;
  wake();
}

bool HttpTransport::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout,
                           [&] { return stats_.requests_in_flight.load() == 0 && ready_.empty(); });
}

void HttpTransport::stop() {
  accepting_ = false;
  running_ = false;
  wake();
}

void HttpTransport::close_conn(std::unique_ptr<Conn>& c) {
  if (!c) return;
  if (c->fd >= 0) {
    ::close(c->fd);
    --stats_.connections_open;
  }
  c.reset();
}

void HttpTransport::reject(std::unique_ptr<Conn>& c, int status, const std::string& message,
                           const std::string& code) {
  ApiError e{status, message, status >= 500 ? "server_error" : "invalid_request_error", {}, code};
  std::string body = api_error_body(e);
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      status, reason_phrase(status), body.size(), body);
  // Best effort: a small answer fits the socket buffer of a fresh connection.
  ssize_t n = ::send(c->fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n;
  // Half-close and drain what the client still sends for a moment, so the
  // kernel does not reset the connection before the client reads the answer.
  ::shutdown(c->fd, SHUT_WR);
  c->state = Conn::State::kClosing;
  c->buf.clear();
  c->deadline = Clock::now() + std::chrono::milliseconds(1000);
}

void HttpTransport::examine(std::unique_ptr<Conn>& c) {
  if (c->state == Conn::State::kIdle && !c->buf.empty()) {
    c->state = Conn::State::kHead;
    c->deadline = Clock::now() + options_.head_timeout;
  }
  if (c->state == Conn::State::kHead) {
    // Tolerate empty lines before a request (RFC 9112 2.2).
    size_t lead = 0;
    while (lead + 1 < c->buf.size() && c->buf[lead] == '\r' && c->buf[lead + 1] == '\n')
      lead += 2;
    if (lead) c->buf.erase(0, lead);
    size_t end = c->buf.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c->buf.size() > options_.max_head_bytes) {
        ++stats_.malformed;
        reject(c, 431, fmt::format("the request head exceeds {} bytes", options_.max_head_bytes),
               "header_too_large");
      }
      return;
    }
    c->head_len = end + 4;
    if (c->head_len > options_.max_head_bytes) {
      ++stats_.malformed;
      reject(c, 431, fmt::format("the request head exceeds {} bytes", options_.max_head_bytes),
             "header_too_large");
      return;
    }
    // Request line: METHOD SP target SP HTTP/1.x
    std::string_view head(c->buf.data(), end);
    size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    bool line_ok = sp1 != std::string_view::npos && sp1 > 0 && sp2 != std::string_view::npos &&
                   sp2 > sp1 + 1 && line.find(' ', sp2 + 1) == std::string_view::npos;
    if (line_ok) {
      for (size_t i = 0; i < sp1; ++i) line_ok = line_ok && is_token_char(line[i]);
      for (size_t i = sp1 + 1; i < sp2; ++i)
        line_ok = line_ok && static_cast<unsigned char>(line[i]) > 0x20 &&
                  static_cast<unsigned char>(line[i]) < 0x7f;
      std::string_view version = line.substr(sp2 + 1);
      line_ok = line_ok && (version == "HTTP/1.1" || version == "HTTP/1.0");
    }
    if (!line_ok) {
      ++stats_.malformed;
      reject(c, 400, "malformed HTTP request line", "bad_request_line");
      return;
    }
    if (sp2 - sp1 - 1 > options_.max_uri_bytes) {
      ++stats_.malformed;
      reject(c, 414, fmt::format("the request target exceeds {} bytes", options_.max_uri_bytes),
             "uri_too_long");
      return;
    }
    // Headers.
    size_t count = 0;
    bool have_length = false, chunked = false;
    uint64_t length = 0;
    std::string_view rest = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
    while (!rest.empty()) {
      size_t e = rest.find("\r\n");
      std::string_view h = rest.substr(0, e);
      rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 2);
      if (++count > options_.max_headers) {
        ++stats_.malformed;
        reject(c, 431, fmt::format("more than {} header lines", options_.max_headers),
               "header_too_large");
        return;
      }
      size_t colon = h.find(':');
      bool ok = colon != std::string_view::npos && colon > 0;
      for (size_t i = 0; ok && i < colon; ++i) ok = is_token_char(h[i]);
      for (char ch : h) ok = ok && ch != '\0' && ch != '\n' && ch != '\r';
      if (!ok) {  // also rejects obsolete line folding (a line starting with a space)
        ++stats_.malformed;
        reject(c, 400, "malformed HTTP header line", "bad_header");
        return;
      }
      std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
      if (iequals(name, "Content-Length")) {
        uint64_t v = 0;
        bool digits = !value.empty() && value.size() <= 18;
        for (char ch : value) {
          digits = digits && ch >= '0' && ch <= '9';
          if (digits) v = v * 10 + static_cast<uint64_t>(ch - '0');
        }
        if (!digits || (have_length && v != length)) {
          ++stats_.malformed;
          reject(c, 400, "invalid Content-Length", "bad_content_length");
          return;
        }
        have_length = true;
        length = v;
      } else if (iequals(name, "Transfer-Encoding")) {
        if (!iequals(value, "chunked")) {
          ++stats_.malformed;
          reject(c, 501, "only 'Transfer-Encoding: chunked' is supported", "bad_transfer_encoding");
          return;
        }
        chunked = true;
      }
    }
    if (chunked && have_length) {  // ambiguous framing (request smuggling)
      ++stats_.malformed;
      reject(c, 400, "both Content-Length and Transfer-Encoding", "bad_content_length");
      return;
    }
    if (length > options_.max_body_bytes) {
      ++stats_.malformed;
      reject(c, 413, fmt::format("the request body exceeds {} bytes", options_.max_body_bytes),
             "body_too_large");
      return;
    }
    if (!have_length && !chunked) {
      // A request without either has no body (RFC 9112 6.3); say so to
      // httplib, which would otherwise read a POST body until the close.
      c->buf.insert(end + 2, "Content-Length: 0\r\n");
      c->head_len += 19;
    }
    c->body_len = static_cast<size_t>(length);
    c->chunked = chunked;
    c->state = Conn::State::kBody;
    c->deadline = Clock::now() + options_.body_timeout;
  }
  if (c->state == Conn::State::kBody) {
    if (!c->chunked && c->buf.size() < c->head_len + c->body_len) return;
    std::unique_ptr<Conn> job = std::move(c);
    {
      std::lock_guard<std::mutex> lock(mu_);
      buffered_bytes_ += job->buf.size();
      ready_.push_back(std::move(job));
    }
    work_cv_.notify_one();
  }
}

void HttpTransport::poll_loop() {
  std::vector<pollfd> fds;
  std::vector<char> chunk(64u << 10);
  bool listening = true;
  while (running_) {
    if (listening && !accepting_) {
      // Graceful stop: idle keep-alives go now; new connections are still
      // accepted, to be told 503 rather than left in the backlog.
      listening = false;
      for (auto& c : conns_)
        if (c && c->state == Conn::State::kIdle) close_conn(c);
    }
    // Keep-alive connections back from the workers.
    {
      std::deque<std::unique_ptr<Conn>> back;
      {
        std::lock_guard<std::mutex> lock(mu_);
        back.swap(returned_);
      }
      for (auto& c : back) {
        // A keep-alive connection (kIdle) or one being closed (kClosing).
        if (c->state == Conn::State::kIdle && (!accepting_ || stopping_)) {
          close_conn(c);
          continue;
        }
        conns_.push_back(std::move(c));
        if (conns_.back()->state == Conn::State::kIdle)
          examine(conns_.back());  // a pipelined request may already be here
      }
    }
    conns_.erase(std::remove(conns_.begin(), conns_.end(), nullptr), conns_.end());

    size_t buffered;
    {
      std::lock_guard<std::mutex> lock(mu_);
      buffered = buffered_bytes_;
    }
    const bool body_room = buffered < options_.max_buffered_bytes;
    fds.clear();
    fds.push_back({wake_fds_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (auto& c : conns_) {
      short ev = POLLIN;
      if (c->state == Conn::State::kBody && !body_room) ev = 0;
      fds.push_back({c->fd, ev, 0});
      next = std::min(next, c->deadline);
    }
    int r = ::poll(fds.data(), fds.size(), ms_until(next));
    if (r < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      char b[256];
      while (::read(wake_fds_[0], b, sizeof(b)) > 0) {
      }
    }
    // Connections.
    for (size_t i = 2; i < fds.size(); ++i) {
      std::unique_ptr<Conn>& c = conns_[i - 2];
      if (!c || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::recv(c->fd, chunk.data(), chunk.size(), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_conn(c);
        continue;
      }
      if (n < 0) continue;
      if (c->state == Conn::State::kClosing) continue;  // drained and dropped
      c->buf.append(chunk.data(), static_cast<size_t>(n));
      if (!c->got_bytes) {
        c->got_bytes = true;
        if (c->state == Conn::State::kHead) c->deadline = Clock::now() + options_.head_timeout;
      }
      examine(c);
    }
    // Deadlines.
    const auto now = Clock::now();
    for (auto& c : conns_) {
      if (!c || now < c->deadline) continue;
      if (c->state == Conn::State::kIdle || c->state == Conn::State::kClosing) {
        if (c->state == Conn::State::kIdle) ++stats_.idle_closed;
        close_conn(c);
      } else if (!c->got_bytes) {
        close_conn(c);  // connected and never said anything
      } else {
        ++stats_.head_timeouts;
        reject(c, 408, "the request was not received in time", "request_timeout");
      }
    }
    conns_.erase(std::remove(conns_.begin(), conns_.end(), nullptr), conns_.end());
    // New connections.
    if (fds[1].revents & POLLIN) {
      for (int k = 0; k < 256; ++k) {
        sockaddr_storage addr{};
        socklen_t len = sizeof(addr);
        int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        ++stats_.connections_accepted;
        ++stats_.connections_open;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // tokens leave at once
        auto c = std::make_unique<Conn>();
        c->fd = fd;
        char host[NI_MAXHOST], serv[NI_MAXSERV];
        if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv,
                        sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
          c->remote_ip = host;
          c->remote_port = std::atoi(serv);
        }
        c->deadline = Clock::now() + options_.head_timeout;
        if (!listening) {
          reject(c, 503, "the server is shutting down", "server_shutdown");
        } else if (stats_.connections_open > options_.max_connections) {
          // Idle keep-alives make room first (oldest first), then refuse.
          auto idle = std::find_if(conns_.begin(), conns_.end(), [](const auto& x) {
            return x && x->state == Conn::State::kIdle;
          });
          if (idle != conns_.end()) {
            ++stats_.idle_closed;
            close_conn(*idle);
          } else {
            ++stats_.connections_rejected;
            reject(c, 503, "too many open connections; retry later", "too_many_connections");
          }
        }
        conns_.push_back(std::move(c));
      }
      conns_.erase(std::remove(conns_.begin(), conns_.end(), nullptr), conns_.end());
    }
  }
}

void HttpTransport::worker_loop() {
  for (;;) {
    std::unique_ptr<Conn> c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) return;  // stopping and nothing left
      c = std::move(ready_.front());
      ready_.pop_front();
      buffered_bytes_ -= std::min(buffered_bytes_, c->buf.size());
      ++stats_.requests_in_flight;
    }
    handle(std::move(c));
    {
      std::lock_guard<std::mutex> lock(mu_);
      --stats_.requests_in_flight;
    }
    idle_cv_.notify_all();
  }
}

bool HttpTransport::body_over_limit() { return t_body_over_limit; }

void HttpTransport::handle(std::unique_ptr<Conn> c) {
  ++c->requests;
  t_body_over_limit = false;
  const bool close_after = !accepting_ || stopping_ ||
                           c->requests >= options_.max_requests_per_connection ||
                           stats_.connections_open >= options_.max_connections;
  const size_t request_end = c->head_len + c->body_len;
  bool keep = false;
  {
    ConnStream strm(*c, options_, Clock::now() + options_.body_timeout);
    bool connection_closed = false;
    bool ok = process_request(strm, close_after, connection_closed, nullptr);
    keep = ok && !connection_closed && !close_after;
    if (keep && c->chunked) {
      // A chunked body is consumed by httplib (or not, when a handler
      // answered before reading it): its end is not known here.
      keep = false;
    }
    if (keep) {
      // Whatever the handler left of the body is skipped; the bytes after
      // the request (pipelined requests) stay.
      c->buf.erase(0, std::max(strm.consumed(), std::min(request_end, c->buf.size())));
    }
  }
  if (!keep) {
    // Half-close and let the poller drain what the client still sends for
    // a moment: closing with unread bytes would reset the connection and
    // could destroy the answer before the client reads it.
    ::shutdown(c->fd, SHUT_WR);
    c->state = Conn::State::kClosing;
    c->buf.clear();
    c->deadline = Clock::now() + std::chrono::milliseconds(1000);
  } else {
    c->state = Conn::State::kIdle;
    c->deadline = Clock::now() + options_.keep_alive_timeout;
  }
  c->got_bytes = !c->buf.empty();
  c->head_len = c->body_len = 0;
  c->chunked = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    returned_.push_back(std::move(c));
  }
  wake();
}

}  // namespace ferrite
