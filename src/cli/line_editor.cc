#include "cli/line_editor.h"

#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>

namespace ferrite::cli {

namespace {

constexpr size_t kMaxHistory = 1000;

// Display columns of UTF-8 text (one per code point; wide characters are
// rare in a chat prompt and cost only a misplaced cursor).
size_t columns(const std::string& s, size_t end) {
  size_t n = 0;
  for (size_t i = 0; i < end && i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) ++n;
  return n;
}

bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xc0) == 0x80; }

void write_all(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(STDOUT_FILENO, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// 0 at end of input; -1 on an interrupted read (a signal).
int read_byte(char* c) {
  ssize_t n = ::read(STDIN_FILENO, c, 1);
  if (n == 1) return 1;
  if (n < 0 && errno == EINTR) return -1;
  return 0;
}

class RawMode {
 public:
  RawMode() {
    if (tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_iflag &= ~(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
    raw.c_cflag |= CS8;
    raw.c_lflag &= ~(ECHO | ICANON | IEXTEN | ISIG);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    ok_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;  // typed-ahead input stays
  }
  ~RawMode() {
    if (ok_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  bool ok() const { return ok_; }

 private:
  termios saved_{};
  bool ok_ = false;
};

}  // namespace

LineEditor::LineEditor(std::string history_file) : history_file_(std::move(history_file)) {
  interactive_ = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  if (!history_file_.empty()) {
    std::ifstream in(history_file_);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) history_.push_back(line);
    if (history_.size() > kMaxHistory)
      history_.erase(history_.begin(), history_.end() - kMaxHistory);
  }
}

LineEditor::~LineEditor() = default;

void LineEditor::add_history(const std::string& line) {
  if (line.empty() || line.find('\n') != std::string::npos) return;
  if (!history_.empty() && history_.back() == line) return;
  history_.push_back(line);
  if (history_.size() > kMaxHistory) history_.erase(history_.begin());
  if (!history_file_.empty()) {
    std::ofstream out(history_file_, std::ios::app);
    if (out) out << line << '\n';
  }
}

LineEditor::Read LineEditor::read(const std::string& prompt, std::string* line) {
  line->clear();
  if (interactive_) return read_raw(prompt, line);
  if (!std::getline(std::cin, *line)) return Read::kEof;
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return Read::kLine;
}

LineEditor::Read LineEditor::read_raw(const std::string& prompt, std::string* line) {
  RawMode raw;
  if (!raw.ok()) {
    write_all(prompt);
    if (!std::getline(std::cin, *line)) return Read::kEof;
    return Read::kLine;
  }
  std::string buf;
  size_t pos = 0;
  size_t hist = history_.size();  // == size: the line being edited
  std::string editing;            // the new line while browsing history
  auto refresh = [&] {
    std::string s = "\r" + prompt + buf + "\x1b[K\r";
    const size_t col = columns(prompt, prompt.size()) + columns(buf, pos);
    if (col > 0) s += "\x1b[" + std::to_string(col) + "C";
    write_all(s);
  };
  auto show_history = [&](size_t h) {
    if (hist == history_.size()) editing = buf;
    hist = h;
    buf = hist == history_.size() ? editing : history_[hist];
    pos = buf.size();
    refresh();
  };
  refresh();
  for (;;) {
    char c = 0;
    int r = read_byte(&c);
    if (r < 0) continue;
    if (r == 0) {
      if (buf.empty()) {
        write_all("\r\n");
        return Read::kEof;
      }
      c = '\r';
    }
    switch (c) {
      case '\r':
      case '\n':
        write_all("\r\n");
        *line = buf;
        return Read::kLine;
      case 3:  // Ctrl-C
        if (buf.empty()) {
          write_all("\r\n");
          return Read::kInterrupt;
        }
        write_all("^C\r\n");
        buf.clear();
        pos = 0;
        hist = history_.size();
        refresh();
        break;
      case 4:  // Ctrl-D
        if (buf.empty()) {
          write_all("\r\n");
          return Read::kEof;
        }
        if (pos < buf.size()) {
          size_t end = pos + 1;
          while (end < buf.size() && continuation(buf[end])) ++end;
          buf.erase(pos, end - pos);
          refresh();
        }
        break;
      case 127:
      case 8:  // Backspace
        if (pos > 0) {
          size_t start = pos - 1;
          while (start > 0 && continuation(buf[start])) --start;
          buf.erase(start, pos - start);
          pos = start;
          refresh();
        }
        break;
      case 1:  // Ctrl-A
        pos = 0;
        refresh();
        break;
      case 5:  // Ctrl-E
        pos = buf.size();
        refresh();
        break;
      case 2:  // Ctrl-B
        while (pos > 0 && continuation(buf[--pos])) {
        }
        refresh();
        break;
      case 6:  // Ctrl-F
        if (pos < buf.size())
          while (++pos < buf.size() && continuation(buf[pos])) {
          }
        refresh();
        break;
      case 11:  // Ctrl-K
        buf.erase(pos);
        refresh();
        break;
      case 21:  // Ctrl-U
        buf.erase(0, pos);
        pos = 0;
        refresh();
        break;
      case 23: {  // Ctrl-W: the word before the cursor
        size_t start = pos;
        while (start > 0 && buf[start - 1] == ' ') --start;
        while (start > 0 && buf[start - 1] != ' ') --start;
        buf.erase(start, pos - start);
        pos = start;
        refresh();
        break;
      }
      case 12:  // Ctrl-L
        write_all("\x1b[H\x1b[2J");
        refresh();
        break;
      case 16:  // Ctrl-P
        if (hist > 0) show_history(hist - 1);
        break;
      case 14:  // Ctrl-N
        if (hist < history_.size()) show_history(hist + 1);
        break;
      case 27: {  // escape sequences
        char a = 0, b = 0;
        if (read_byte(&a) != 1) break;
        if (a != '[' && a != 'O') break;
        if (read_byte(&b) != 1) break;
        if (b >= '0' && b <= '9') {
          char t = 0;
          std::string digits(1, b);
          while (read_byte(&t) == 1 && t >= '0' && t <= '9') digits += t;
          if (t != '~') break;
          if (digits == "3" && pos < buf.size()) {  // Delete
            size_t end = pos + 1;
            while (end < buf.size() && continuation(buf[end])) ++end;
            buf.erase(pos, end - pos);
          } else if (digits == "1" || digits == "7") {
            pos = 0;
          } else if (digits == "4" || digits == "8") {
            pos = buf.size();
          }
          refresh();
          break;
        }
        switch (b) {
          case 'A':
            if (hist > 0) show_history(hist - 1);
            break;
          case 'B':
            if (hist < history_.size()) show_history(hist + 1);
            break;
          case 'C':
            if (pos < buf.size())
              while (++pos < buf.size() && continuation(buf[pos])) {
              }
            refresh();
            break;
          case 'D':
            while (pos > 0 && continuation(buf[--pos])) {
            }
            refresh();
            break;
          case 'H':
            pos = 0;
            refresh();
            break;
          case 'F':
            pos = buf.size();
            refresh();
            break;
          default:
            break;
        }
        break;
      }
      case '\t':
        buf.insert(pos, 4, ' ');
        pos += 4;
        refresh();
        break;
      default:
        if (static_cast<unsigned char>(c) < 32) break;  // other control keys
        buf.insert(buf.begin() + static_cast<std::ptrdiff_t>(pos), c);
        ++pos;
        // Only redraw once a UTF-8 character is complete.
        if (pos >= buf.size() || !continuation(buf[pos])) refresh();
        break;
    }
  }
}

}  // namespace ferrite::cli
