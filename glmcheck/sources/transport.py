"""HTTP to one inference server: timeouts, retries with exponential backoff, one error type, and
bounded concurrency.

Retried, up to `retries` times after the first attempt, `backoff x 2^i` seconds apart (or the
server's Retry-After when that is longer; at most MAX_DELAY): connection failures (refused, reset,
closed before an answer, no connection within the connect timeout; none once the client is
closed) and HTTP 429, 502, 503, 504. Not retried: no answer within the timeout (the server is slow, and asking again
only adds to its load), any other HTTP error, a body that is not JSON. Every failure is an `EndpointError`, a ValueError
whose message is one line: `endpoint NAME (URL): what went wrong`.
"""

from __future__ import annotations

import json
import numbers
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import httpx

RETRY_STATUS = frozenset({429, 502, 503, 504})
MAX_DELAY = 30.0  # seconds: the longest pause between two attempts, whatever Retry-After says
ERROR_CHARS = 200  # characters of a server's error message kept in an EndpointError


class EndpointError(ValueError):
    """A server could not give what was asked. The message is one line naming the endpoint (name and
    URL) and what went wrong; `status` is the HTTP status when the server answered one, else None."""

    def __init__(self, name: str | None, url: str | None, what: str, status: int | None = None):
        self.name, self.url, self.what, self.status = name, url, one_line(what, 400), status
        super().__init__(f"endpoint {name} ({url}): {self.what}" if name is not None else self.what)


# What a server's error message says when the model's logits came out NaN/Inf (`glmcheck serve`: "produced non-finite
# logits"): an answer about the kernel it runs, not a broken server.
_NON_FINITE = re.compile(r"non-finite|\bnan\b|not finite", re.IGNORECASE)


def says_non_finite(message: str) -> bool:
    """True when a server's error `message` says its logits were NaN/Inf."""
    return bool(_NON_FINITE.search(message))


def reports_non_finite(err: EndpointError) -> bool:
    """True when `err` is a server's HTTP 5xx answer whose message says its logits were NaN/Inf."""
    return err.status is not None and err.status >= 500 and says_non_finite(err.what)


def one_line(text: str, limit: int = ERROR_CHARS) -> str:
    """`text` with its whitespace runs collapsed to one space, cut to `limit` characters ('...' added)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def server_message(response: httpx.Response) -> str:
    """The error message in a server's error body (vLLM, SGLang, OpenAI, FastAPI forms), else its text."""
    try:
        body = response.json()
    except ValueError:
        return one_line(response.text) or "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        for candidate in (body.get("message"), error.get("message") if isinstance(error, dict) else error,
                          body.get("detail")):
            if isinstance(candidate, str) and candidate:
                return one_line(candidate)
            if candidate:
                return one_line(json.dumps(candidate))
    return one_line(json.dumps(body))


@dataclass(frozen=True)
class HttpOptions:
    """How long to wait and how often to ask again. Times in seconds."""

    timeout: float = 120.0  # for an answer (each read and write, and a free connection of the pool)
    connect_timeout: float = 10.0  # to open a connection
    retries: int = 3  # attempts after the first, on the failures the module docstring lists
    backoff: float = 0.5  # before the first retry; doubled before each next one

    def __post_init__(self):
        for name in ("timeout", "connect_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and value > 0):
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        if not (isinstance(self.retries, int) and not isinstance(self.retries, bool) and self.retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, got {self.retries!r}")
        if not (isinstance(self.backoff, numbers.Real) and self.backoff >= 0):
            raise ValueError(f"backoff must be a number of seconds >= 0, got {self.backoff!r}")


def _pause(seconds: float) -> None:
    """Sleep between two attempts (tests replace it)."""
    time.sleep(seconds)


def _retry_after(response: httpx.Response) -> float:
    """The server's Retry-After in seconds (0 when absent or given as a date)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", 0)))
    except ValueError:
        return 0.0


class Http:
    """JSON over HTTP to one server's base URL, with the module's timeouts and retries. Thread-safe:
    worker threads share one. Close it (or use it as a context manager) when done."""

    def __init__(self, name: str, url: str, options: HttpOptions = HttpOptions(), *, max_connections: int = 4,
                 transport: httpx.BaseTransport | None = None):
        """`name` and `url` appear in every error; `transport` replaces the network (tests)."""
        self.name, self.url, self.options = name, url, options
        timeout = httpx.Timeout(options.timeout, connect=options.connect_timeout)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.Client(base_url=url, timeout=timeout, limits=limits, transport=transport)
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; requests still running in other threads fail and are not retried."""
        self._closed = True
        self._client.close()

    def error(self, what: str, status: int | None = None) -> EndpointError:
        """An EndpointError naming this server."""
        return EndpointError(self.name, self.url, what, status)

    def get(self, path: str) -> Any:
        """The JSON body of `GET path` (EndpointError on any failure)."""
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        """The JSON body of `POST path` with the JSON `body` (EndpointError on any failure)."""
        return self.request("POST", path, body)

    def try_get(self, path: str) -> tuple[str, Any]:
        """("ok", JSON body) of `GET path`, or (what the server answered instead, None): for paths a
        server may lack. A server that does not answer at all still raises EndpointError."""
        try:
            return "ok", self.get(path)
        except EndpointError as err:
            if err.status is None:
                raise
            return err.what.removeprefix(f"GET {path} "), None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON body of one request, retried as the module docstring says."""
        opts = self.options
        attempts = opts.retries + 1
        for attempt in range(attempts):
            if self._closed:
                raise self.error(f"{method} {path}: abandoned (the client is closed)")
            delay = opts.backoff * 2 ** attempt
            try:
                response = self._client.request(method, path, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.WriteError) as err:
                lost = "server unreachable" if isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout)) \
                    else "connection lost"
                failure = f"{lost} ({type(err).__name__}: {err or 'no detail'})"
                status = None
            except httpx.TimeoutException as err:
                raise self.error(f"{method} {path}: no answer within {opts.timeout:g} s (the timeout; "
                                 f"{type(err).__name__})") from None
            except httpx.HTTPError as err:
                raise self.error(f"{method} {path}: {type(err).__name__}: {err}") from None
            else:
                status = response.status_code
                if status in RETRY_STATUS:
                    failure = f"answered HTTP {status}: {server_message(response)}"
                    delay = max(delay, _retry_after(response))
                elif status >= 400:
                    raise self.error(f"{method} {path} answered HTTP {status}: {server_message(response)}", status)
                else:
                    try:
                        return response.json()
                    except ValueError:
                        raise self.error(f"{method} {path} answered HTTP {status} with a body that is not JSON: "
                                         f"{one_line(response.text, 80)!r}", status) from None
            if attempt + 1 < attempts and not self._closed:
                _pause(min(delay, MAX_DELAY))
        tries = f"after {attempts} attempt{'s' if attempts > 1 else ''}"
        raise self.error(f"{method} {path} {failure} {tries}" if status is not None
                         else f"{method} {path}: {failure} {tries}", status)


K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")
_STOP = object()


def run_bounded(work: Callable[[T], R], items: Iterable[tuple[K, T]], concurrency: int = 4
                ) -> Iterator[tuple[K, R]]:
    """Run `work(item)` for each (key, item) in up to `concurrency` threads; yield (key, result) as each
    finishes (in finishing order), so a caller can save each before the next. Items are taken from
    `items` only as threads free up. After the first exception no item is started; those running
    finish and their results are yielded, then the exception is raised. A caller that stops early
    (break, an exception, Ctrl-C) leaves the running items to end on their own (daemon threads: the
    interpreter does not wait for them)."""
    if not (isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency >= 1):
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    tasks: queue.Queue = queue.Queue()
    results: queue.Queue = queue.Queue()

    def worker() -> None:
        while (job := tasks.get()) is not _STOP:
            key, item = job
            try:
                results.put((key, work(item), None))
            except Exception as exc:  # noqa: BLE001  (handed to the caller's thread)
                results.put((key, None, exc))

    threads = [threading.Thread(target=worker, name=f"glmcheck-source-{i}", daemon=True)
               for i in range(concurrency)]
    for thread in threads:
        thread.start()
    source = iter(items)
    running, error, exhausted = 0, None, False
    try:
        while True:
            while error is None and not exhausted and running < concurrency:
                job = next(source, _STOP)
                if job is _STOP:
                    exhausted = True
                else:
                    tasks.put(job)
                    running += 1
            if running == 0:
                break
            key, result, exc = results.get()
            running -= 1
            if exc is not None:
                error = error or exc
            else:
                yield key, result
        if error is not None:
            raise error
    finally:
        for _ in threads:
            tasks.put(_STOP)
