// The server's HTTP transport: cpp-httplib parses requests, routes them and
// writes responses, but sockets, connections and their deadlines are ours.
//
// Why not httplib's own listen(): it gives every connection a thread from a
// fixed pool for its whole life and reads the request head line by line
// with only a per-recv timeout, so a few hundred slow ("slowloris") or idle
// keep-alive connections take every thread; its listen backlog is 5, so a
// burst of connects is dropped; pipelined requests after the first are lost;
// a negative Content-Length holds the connection until the read timeout.
//
// Here one poller thread owns every connection that is not running a
// handler: it accepts (backlog sized for bursts), reads request heads and
// bodies without blocking, and enforces
//   - a total deadline for the request head and one for the body,
//   - a size limit for the head, the header count and the body,
//   - an idle deadline between keep-alive requests (idle connections are
//     closed at once when connections run short),
//   - a cap on open connections (beyond it: 503 and close).
// A request is handed to a worker thread only when it is complete (or, for
// a chunked body, when its head is); a malformed head gets a 4xx in the
// OpenAI error shape and the connection is closed. Workers run httplib's
// process_request() on a stream that replays the buffered bytes, so the
// bytes after a request (pipelining) stay for the next one.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace ferrite {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  int workers = 64;           // handler threads = requests in flight at once
  int max_connections = 1024; // open sockets; beyond: 503 and close
  int listen_backlog = 1024;  // pending connects the kernel queues
  size_t max_head_bytes = 64u << 10;  // request line + headers (431 above)
  size_t max_headers = 100;           // header lines (431 above)
  size_t max_uri_bytes = 8u << 10;    // request target (414 above)
  size_t max_body_bytes = 8u << 20;   // Content-Length (413 above)
  std::chrono::milliseconds head_timeout{10000};       // whole head, from its first byte
  std::chrono::milliseconds body_timeout{30000};       // whole body, after the head
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests
  std::chrono::milliseconds write_timeout{30000};      // one write to a client not reading
  int max_requests_per_connection = 1000;
  // Bytes of complete requests buffered while every worker is busy; past
  // it, bodies are read no further until workers catch up.
  size_t max_buffered_bytes = 256u << 20;
};

// Counters of what the transport refused (rendered in /metrics).
struct TransportStats {
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> connections_rejected{0};  // over max_connections
  std::atomic<uint64_t> head_timeouts{0};         // 408: head or body too slow
  std::atomic<uint64_t> malformed{0};             // 400 / 411 / 413 / 414 / 431 from the transport
  std::atomic<uint64_t> idle_closed{0};           // keep-alives closed for idleness or pressure
  std::atomic<int64_t> connections_open{0};
  std::atomic<int64_t> requests_in_flight{0};
};

class HttpTransport : public httplib::Server {
 public:
  explicit HttpTransport(TransportOptions options);
  ~HttpTransport() override;

  // Creates, binds and listens (port() is valid afterwards). Refuses a port
  // another process listens on (no SO_REUSEPORT).
  Status bind();
  int port() const { return port_; }
  // Runs the poller and the workers until stop(); call bind() first.
  Status serve();
  // Graceful: stop accepting, close idle connections, answer every later
  // request with "Connection: close". Requests in flight run on.
  void stop_accepting();
  bool accepting() const { return accepting_.load(); }
  // Waits up to `timeout` for the requests in flight; true when none is left.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Ends serve(): closes every connection and joins the threads (a handler
  // still running is waited for).
  void stop();

  // True inside a handler's error path when the request's chunked body ran
  // past max_body_bytes (the error handler turns the read failure into 413).
  static bool body_over_limit();

  const TransportStats& stats() const { return stats_; }
  const TransportOptions& options() const { return options_; }

 private:
  struct Conn;
  class ConnStream;
  void poll_loop();
  void worker_loop();
  void wake();
  // Looks for a complete request in c's buffer; dispatches it, answers an
  // error, or waits for more bytes.
  void examine(std::unique_ptr<Conn>& c);
  void reject(std::unique_ptr<Conn>& c, int status, const std::string& message,
              const std::string& code);
  void close_conn(std::unique_ptr<Conn>& c);
  void handle(std::unique_ptr<Conn> c);

  TransportOptions options_;
  TransportStats stats_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> running_{false};
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stopping_{false};

  std::vector<std::unique_ptr<Conn>> conns_;  // owned by the poller thread

  std::mutex mu_;  // guards the queues below
  std::condition_variable work_cv_, idle_cv_;
  std::deque<std::unique_ptr<Conn>> ready_;     // complete requests for workers
  std::deque<std::unique_ptr<Conn>> returned_;  // keep-alive connections back to the poller
  size_t buffered_bytes_ = 0;                    // bytes of requests in ready_
  std::vector<std::thread> workers_;
};

}  // namespace ferrite
