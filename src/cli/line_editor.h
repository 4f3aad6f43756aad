// A small raw-mode line editor for `ferrite run` on a terminal (no
// dependency): cursor keys, Home / End, Backspace / Delete, Ctrl-A / E / B /
// F / K / U / W / L, history (Up / Down, kept in a file), Ctrl-C clears the
// line (on an empty line: interrupt), Ctrl-D on an empty line: end of input.
// On anything but a terminal it reads plain lines and prints no prompt.
#pragma once

#include <string>
#include <vector>

namespace ferrite::cli {

class LineEditor {
 public:
  enum class Read { kLine, kEof, kInterrupt };

  // `history_file`: loaded now, appended to by add_history ("" = none).
  explicit LineEditor(std::string history_file = "");
  ~LineEditor();
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  // True when stdin and stdout are terminals (editing and prompts on).
  bool interactive() const { return interactive_; }
  // Reads one line (without its newline) after printing `prompt`
  // (interactive only).
  Read read(const std::string& prompt, std::string* line);
  void add_history(const std::string& line);

 private:
  Read read_raw(const std::string& prompt, std::string* line);
  bool interactive_ = false;
  std::string history_file_;
  std::vector<std::string> history_;
};

}  // namespace ferrite::cli
