"""`glmcheck serve` processes for tests: started together on free localhost ports (`--port 0`), ready when
their ready line is printed, stopped with SIGTERM (killed if they do not stop)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading

import pytest

MODEL = "ref-cpu"


def ready_line(process: subprocess.Popen, timeout: float) -> str:
    """The first stdout line of `process` within `timeout` seconds (the test fails, with its stderr, otherwise)."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        line = ""
    if not line:
        process.kill()
        pytest.fail(f"no ready line in {timeout} s; stderr: {process.communicate()[1][-2000:]}")
    return line


class Servers:
    """Named `glmcheck serve --model ref-cpu --backend B` processes; `urls[name]` once started."""

    def __init__(self):
        self.processes: dict[str, subprocess.Popen] = {}
        self.urls: dict[str, str] = {}

    def start(self, backends: dict[str, str], *, env: dict[str, str] | None = None, timeout: float = 240,
              args: tuple[str, ...] = ()) -> None:
        """Start one process per {name: backend} (all at once; `args` added to each command line), then wait
        for each ready line."""
        started = {}
        for name, backend in backends.items():
            started[name] = subprocess.Popen(
                [sys.executable, "-m", "glmcheck", "serve", "--model", MODEL, "--backend", backend, "--port", "0",
                 *args],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        self.processes.update(started)
        for name, process in started.items():
            self.urls[name] = ready_line(process, timeout).split(" on ")[1].strip()

    def spec(self, name: str, alias: str | None = None) -> str:
        """`NAME=URL` of a started server (named `alias` when given)."""
        return f"{alias or name}={self.urls[name]}"

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
        self.urls.pop(name, None)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)
