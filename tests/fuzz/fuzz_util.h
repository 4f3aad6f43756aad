// Shared helpers of the libFuzzer targets (tests/fuzz, docs/hardening.md).
//
// Multi-part inputs: a target that needs several files or strings splits its
// input on kSplit (a NUL byte cannot occur in JSON or Jinja text, so the
// separator never cuts a real file of the seed corpora). Part i is empty when
// the input has fewer parts.
//
// Files: the readers under test take paths, so each process writes its parts
// into one private scratch folder, rewritten on every input and removed at
// exit: under $FERRITE_FUZZ_TMPDIR, else /dev/shm (tmpfs: no disk I/O per
// input) when writable, else $TMPDIR or /tmp.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

namespace ferrite::fuzz {

inline constexpr std::string_view kSplit{"\0\xff\0\xff", 4};

// Splits `data` into at most `max_parts` parts on kSplit (the last part keeps
// any further separators).
inline std::vector<std::string_view> split_parts(const uint8_t* data, size_t size,
                                                 size_t max_parts) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    size_t at = in.find(kSplit);
    if (at == std::string_view::npos) break;
    parts.push_back(in.substr(0, at));
    in.remove_prefix(at + kSplit.size());
  }
  parts.push_back(in);
  parts.resize(max_parts);
  return parts;
}

// Aborts with a message: an invariant of the code under test does not hold
// (libFuzzer reports it as a crash and saves the input).
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}
#define FERRITE_FUZZ_CHECK(cond) \
  do {                           \
    if (!(cond)) ::ferrite::fuzz::fail(#cond); \
  } while (0)

class ScratchDir {
 public:
  ScratchDir() {
    std::string base = "/tmp";
    if (const char* tmp = std::getenv("TMPDIR"); tmp && *tmp) base = tmp;
    if (::access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    if (const char* dir = std::getenv("FERRITE_FUZZ_TMPDIR"); dir && *dir) base = dir;
    path_ = std::filesystem::path(base) / ("ferrite-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  // Empties the folder.
  void clear() const {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(path_, ec)) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }
  // Writes `bytes` to `name` (may contain one folder level, created when
  // missing) inside the folder; returns the full path.
  std::string write(const std::string& name, std::string_view bytes) const {
    std::filesystem::path p = path_ / name;
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT) {
      std::filesystem::create_directories(p.parent_path());
      fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    }
    if (fd < 0) fail("cannot create a scratch file");
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) fail("cannot write a scratch file");
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

// One scratch folder per process (destroyed at exit).
inline const ScratchDir& scratch() {
  static ScratchDir dir;
  return dir;
}

}  // namespace ferrite::fuzz
