"""A command started as a user starts it in a terminal: in a session of its own, with a pseudo
terminal as its controlling terminal, so that Ctrl-C reaches its foreground process group as a
keyboard's does. Every process the command ever starts (Ray's daemons and workers, the engines,
HAProxy) stays in that session unless it leaves it on purpose: the session is what a stop must
leave nothing of."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import subprocess
import termios
import threading
import time
from pathlib import Path

import psutil

CTRL_C = b"\x03"


class TerminalSession:
    """`argv` running in a new session on a pseudo terminal; what it prints goes to `log`."""

    def __init__(self, argv: list[str], log: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.argv = argv
        self.log = log
        master, terminal = pty.openpty()
        self._master = master

        def take_terminal() -> None:  # in the child, after setsid: the pty becomes its terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            # As an interactive shell starts a foreground command: a caller started without job
            # control (`nohup`, `cmd &` in a script) has SIGINT ignored, which a child inherits
            # and Python then keeps, so Ctrl-C would not reach the command.
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        self.process = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env, cwd=cwd,
                                        start_new_session=True, preexec_fn=take_terminal)
        os.close(terminal)
        self.sid = self.process.pid
        self.started = time.monotonic()
        # Read all the time: a terminal whose output is not read blocks the writer once full.
        self._reader = threading.Thread(target=self._copy_output, name="terminal-output", daemon=True)
        self._reader.start()

    def _copy_output(self) -> None:
        with open(self.log, "wb") as out:
            while True:
                try:
                    chunk = os.read(self._master, 65536)
                except OSError:  # every writer closed the terminal
                    return
                if not chunk:
                    return
                out.write(chunk)
                out.flush()

    def alive(self) -> bool:
        return self.process.poll() is None

    def ctrl_c(self) -> None:
        """What a keyboard's Ctrl-C does: the terminal sends SIGINT to its foreground group."""
        os.write(self._master, CTRL_C)

    def signal_group(self, signum: int) -> None:
        """`kill -SIG -PGID`: the command's process group (what systemd, `timeout` and many
        supervisors signal). Processes that made groups of their own are not in it."""
        os.killpg(self.process.pid, signum)

    def wait(self, timeout_s: float) -> int | None:
        """The command's exit status, or None while it still runs after `timeout_s`."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def processes(self) -> list[psutil.Process]:
        """The live processes of the session (an ended one its parent has yet to reap holds
        nothing but its pid, and is left out)."""
        found = []
        for process in psutil.process_iter(["status"]):
            try:
                if process.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(process.pid) == self.sid:
                    found.append(process)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return found

    def wait_until_empty(self, timeout_s: float) -> list[psutil.Process]:
        """Waits up to `timeout_s` for every process of the session to end; those left."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = self.processes()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.5)

    def kill_all(self) -> None:
        """Ends whatever of the session is left (after a stop that left some, for the next start)."""
        for process in self.processes():
            try:
                process.kill()
            except psutil.Error:
                continue
        self.wait_until_empty(10.0)
        self.wait(10.0)

    def close(self) -> None:
        """Kills what of the session is left, so that the next start finds the machine clean."""
        self.kill_all()
        try:
            os.close(self._master)
        except OSError:
            pass
        self._reader.join(5.0)


def signal_process(pid: int, signum: int) -> None:
    """A signal to one process alone (`docker stop` and Kubernetes signal the container's
    first process; `kill PID`)."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass

