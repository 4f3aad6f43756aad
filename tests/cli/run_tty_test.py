#!/usr/bin/env python3
"""`ferrite run` in a pseudo-terminal: the startup summary, the prompt, /? and
/help, line editing (cursor keys, Ctrl-A, Backspace), history (Up, and the
history file), multi-line input with \"\"\" ... \"\"\", the tok/s line, colour,
Ctrl-C stopping a reply and the session going on, Ctrl-C on an empty line
quitting (130), Ctrl-D quitting (0).
Usage: run_tty_test.py FERRITE_BINARY"""
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

FERRITE = sys.argv[1]
WORK = tempfile.mkdtemp()
passed = failed = 0


def check(name, ok, details=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: {name}")
    else:
        failed += 1
        print(f"FAIL: {name}: {details}")


class Session:
    def __init__(self, args):
        env = dict(os.environ, HOME=WORK, FERRITE_HOME=WORK, TERM="xterm")
        env.pop("NO_COLOR", None)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(FERRITE, [FERRITE, "run", *args], env)
        self.out = b""

    def pump(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return False
            if not data:
                return False
            self.out += data
        return True

    def wait_for(self, needle, timeout=60, start=0):
        """Waits until `needle` (bytes) appears in the output after `start`."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            i = self.out.find(needle, start)
            if i >= 0:
                return i + len(needle)
            if not self.pump(0.1):
                break
        return -1

    def send(self, s):
        os.write(self.fd, s.encode() if isinstance(s, str) else s)

    def exit_code(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.pump(0.05)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        return None


def main():
    subprocess.run([FERRITE, "create-model", "--out", f"{WORK}/small"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([FERRITE, "create-model", "--out", f"{WORK}/slow", "--hidden", "512",
                    "--layers", "8", "--heads", "8", "--kv-heads", "4", "--head-dim", "64",
                    "--intermediate", "1536"], check=True, stdout=subprocess.DEVNULL)
    history = f"{WORK}/history"
    PROMPT = b"\x1b[1m>>> \x1b[0m"

    s = Session([f"{WORK}/small", "--max-tokens", "6", "--temperature", "0",
                 "--history-file", history])
    at = s.wait_for(PROMPT)
    check("prompt on a terminal (bold)", at >= 0, s.out[-400:])
    check("startup summary", b"KV cache" in s.out and b"max context 4096 tokens" in s.out
          and b"loaded in" in s.out, s.out[-600:])

    s.send("/?\r")
    at2 = s.wait_for(b"Commands:", start=at)
    at3 = s.wait_for(PROMPT, start=max(at2, 0))
    check("/? prints the commands, not a reply", at2 >= 0 and at3 >= 0 and
          b"tok/s" not in s.out[at:at3], s.out[at:])
    s.send("/help\r")
    at4 = s.wait_for(b"Commands:", start=at3)
    at = s.wait_for(PROMPT, start=max(at4, 0))
    check("/help too", at4 >= 0 and at >= 0, s.out[at3:])

    s.send("Hello\r")
    st = s.wait_for(b"tok/s", start=at)
    check("a reply and its tok/s line", st >= 0, s.out[at:])
    check("the tok/s line is dim", s.out.rfind(b"\x1b[2m[", 0, st) >= at, s.out[at:st + 10])
    at = s.wait_for(PROMPT, start=max(st, 0))

    # Up recalls "Hello"; Enter sends it again.
    s.send("\x1b[A")
    up = s.wait_for(b"Hello", start=at, timeout=10)
    check("Up recalls the last line", up >= 0, s.out[at:])
    s.send("\r")
    st = s.wait_for(b"tok/s", start=at)
    check("the recalled line is sent", st >= 0, s.out[at:])
    at = s.wait_for(PROMPT, start=max(st, 0))

    # Editing: "abcd", Backspace, Ctrl-A, "X", End, Left, "Y" -> "XabYc".
    s.send("abcd\x7f\x01X\x1b[F\x1b[DY\r")
    st = s.wait_for(b"tok/s", start=at)
    at = s.wait_for(PROMPT, start=max(st, 0))

    # Multi-line: """ ... """ is one message (not added to history).
    s.send('"""\r')
    cont = s.wait_for(b"... ", start=at, timeout=10)
    s.send("line one\r")
    s.send('line two"""\r')
    st = s.wait_for(b"tok/s", start=at)
    check("multi-line message: one reply", cont >= 0 and st >= 0 and
          s.out[at:st].count(b"tok/s") == 1, s.out[at:])
    at = s.wait_for(PROMPT, start=max(st, 0))

    s.send("/nope\r")
    un = s.wait_for(b"unknown command", start=at, timeout=10)
    check("an unknown /command is said, not sent", un >= 0, s.out[at:])
    at = s.wait_for(PROMPT, start=max(un, 0))

    s.send("\x04")  # Ctrl-D on an empty line
    rc = s.exit_code()
    check("Ctrl-D quits with 0", rc == 0, f"exit {rc}")
    lines = open(history).read().split("\n") if os.path.exists(history) else []
    check("history file holds the edited lines", "Hello" in lines and "XabYc" in lines and
          "/?" in lines and "line one" not in lines, lines)

    # A new session sees the old history.
    s = Session([f"{WORK}/small", "--max-tokens", "4", "--history-file", history])
    at = s.wait_for(PROMPT)
    s.send("\x1b[A")
    got = s.wait_for(b"/nope", start=at, timeout=10)
    check("history survives a restart", got >= 0, s.out[at:])
    s.send("\x03")  # Ctrl-C with text on the line: clears it
    s.wait_for(b"^C", start=at, timeout=10)
    s.send("\x03")  # on an empty line: quits
    rc = s.exit_code()
    check("Ctrl-C on an empty line quits (130)", rc == 130, f"exit {rc}")

    # Ctrl-C mid-reply stops it; the session goes on.
    s = Session([f"{WORK}/slow", "--max-tokens", "4000", "--ignore-eos", "--threads", "1",
                 "--history-file", "none"])
    at = s.wait_for(PROMPT, timeout=120)
    s.send("Tell me a long story\r")
    # Some reply text first (after the line's own end).
    echo = s.wait_for(b"\r\n", start=max(s.wait_for(b"story", start=at), 0))
    deadline = time.time() + 60
    while time.time() < deadline and len(s.out) - echo < 40:
        s.pump(0.1)
    s.send("\x03")
    stopped = s.wait_for(b"[stopped]", start=echo, timeout=30)
    check("Ctrl-C stops the reply", stopped >= 0, s.out[at:][-300:])
    again = s.wait_for(PROMPT, start=max(stopped, 0), timeout=30)
    check("the session goes on after Ctrl-C", again >= 0, s.out[at:][-300:])
    s.send("/bye\r")
    rc = s.exit_code()
    check("/bye quits with 0", rc == 0, f"exit {rc}")


try:
    main()
finally:
    shutil.rmtree(WORK, ignore_errors=True)
print(f"{passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
