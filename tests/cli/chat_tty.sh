#!/usr/bin/env bash
# deepinfer chat on a terminal (a pty): with libedit, the up arrow recalls
# the previous line (plain terminal input would send "^[[A" instead) and
# Ctrl-D at the prompt quits; piped input (tests/cli/run.sh) stays plain.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "chat_tty.sh: default model not fetched, skipping"; exit 0; }
command -v python3 >/dev/null || { echo "chat_tty.sh: no python3 for the pty, skipping"; exit 0; }
if ! grep -q '^LIBEDIT_FOUND:INTERNAL=1' "$(dirname "$BIN")/CMakeCache.txt" 2>/dev/null; then
  echo "chat_tty.sh: built without libedit, skipping"; exit 0
fi
SLOW=${DI_TEST_SLOW:-1}
python3 - "$BIN" "$MODEL" "$SLOW" <<'PY'
import os, pty, select, signal, sys, time
binary, model, slow = sys.argv[1], sys.argv[2], float(sys.argv[3])
pid, fd = pty.fork()
if pid == 0:
    os.execv(binary, [binary, "chat", "-m", model, "-n", "4", "--temp", "0", "-t", "2"])
log = b""
def on_alarm(*_):
    os.kill(pid, signal.SIGKILL)
    fail("timed out")
signal.signal(signal.SIGALRM, on_alarm)
signal.alarm(int(300 * slow))
def until(pat, timeout):
    global log
    buf, end = b"", time.time() + timeout * slow
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            continue
        try:
            d = os.read(fd, 4096)
        except OSError:
            break
        if not d:
            break
        buf += d
        if pat in buf:
            break
    log += buf
    return buf
def fail(msg):
    sys.exit("FAIL: %s\n--- terminal ---\n%s" % (msg, log.decode("utf-8", "replace")))
out = until(b"> ", 60)
if b"arrows recall" not in out:
    fail("no line editing on a terminal")
os.write(fd, b"Hello tty\r")
if b"[prompt" not in until(b"> ", 120):
    fail("no first reply")
time.sleep(0.5 * slow)
os.write(fd, b"\x1b[A")  # up arrow
if b"Hello tty" not in until(b"Hello tty", 10):
    fail("up arrow did not recall the last line")
os.write(fd, b"\r")
if b"[prompt" not in until(b"> ", 120):
    fail("no second reply")
# Ctrl-D at the prompt. A byte that arrives while libedit is still
# switching the terminal mode can be lost, so send it again while the
# child runs. Once the child exits the pty reads fail at once (EIO) while
# the exit may not be reapable yet, so waiting polls waitpid itself.
def wait_exit(seconds):
    end = time.time() + seconds * slow
    while time.time() < end:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            return st
        try:
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                os.read(fd, 4096)  # drain so the child never blocks
        except OSError:
            time.sleep(0.05)
    return None
time.sleep(0.5 * slow)
status = None
for _ in range(10):
    try:
        os.write(fd, b"\x04")
    except OSError:
        pass  # the pty closed: the child is exiting
    status = wait_exit(2)
    if status is not None:
        break
if status is None:
    fail("Ctrl-D did not end chat")
if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
    fail("exit status %r" % status)
print("ok")
PY
