"""Running the app as a server process: the listening socket (bound and listening before the model
is built, so a port in use is a usage error and `--port 0` gets its real port), uvicorn on it, the
ready line, and a clean stop on SIGTERM or SIGINT.

uvicorn re-raises a caught signal once it has shut down; here a signal is the server's ordinary end:
requests in flight stop between two forwards (503), the server shuts down and `run_server` returns
the signal's name. A second SIGINT forces the exit (uvicorn's force_exit).
"""

from __future__ import annotations

import contextlib
import copy
import signal
import socket
import threading
from collections.abc import Callable, Iterator

import uvicorn
from uvicorn.config import LOGGING_CONFIG

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACEFUL_SHUTDOWN_S = 10  # then requests still running are cancelled


def listen(host: str, port: int, option: str = "--port") -> socket.socket:
    """A TCP socket bound to (host, port) and listening; ValueError naming the options otherwise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"{option} must be an int in [0, 65535], got {port!r}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as err:
        raise ValueError(f"--host {host!r}: not an address of this machine ({err.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise ValueError(f"{option} {port}: cannot listen on {host} ({err.strerror or err})") from None
    return sock


def url_of(host: str, sock: socket.socket) -> str:
    """http://host:port of a listening socket (IPv6 hosts in brackets)."""
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server, announcing readiness and ending on a signal without re-raising it."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None], on_stop: Callable[[], None]):
        super().__init__(config)
        self._on_ready, self._on_stop = on_ready, on_stop
        self.stopped_by: str | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            self._on_ready()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame) -> None:
        self.stopped_by = self.stopped_by or signal.Signals(sig).name
        self._on_stop()
        super().handle_exit(sig, frame)


def run_server(app, sock: socket.socket, *, on_ready: Callable[[], None], on_stop: Callable[[], None],
               log_requests: bool = False) -> str | None:
    """Serve `app` on the listening `sock` until a stop signal; `on_ready` runs once it accepts
    requests, `on_stop` when a signal arrives. Returns the signal's name (None: stopped otherwise).
    uvicorn logs warnings only, and each request with `log_requests` (on stderr: stdout holds the
    ready line only)."""
    logging_config = copy.deepcopy(LOGGING_CONFIG)
    logging_config["handlers"]["access"]["stream"] = "ext://sys.stderr"  # stdout holds the ready line only
    config = uvicorn.Config(app, log_level="info" if log_requests else "warning", access_log=log_requests,
                            log_config=logging_config, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, lifespan="off")
    server = _Server(config, on_ready, on_stop)
    server.run(sockets=[sock])
    return server.stopped_by
