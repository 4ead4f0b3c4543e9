"""Server-sent events (`stream: true`) for /v1/completions and /v1/chat/completions, in OpenAI's format.

Each event is `data: <JSON>` and a blank line; the last is `data: [DONE]`. A completion chunk is a
`text_completion` object whose one choice carries the new text and, with `logprobs`, the new tokens' logprobs
(offsets continuing the choice's text); the first chunk of an echoed prompt carries the prompt and its scores.
A chat chunk is a `chat.completion.chunk` whose choice carries a `delta`: the role first, then the content.
The chunk that ends a choice has its `finish_reason`; with `stream_options: {"include_usage": true}` a chunk
with no choices and the usage comes before `[DONE]`. Text is held back while it could still become a stop
string, or ends in an incomplete character, so no chunk sends what the final text does not hold. A fault
after the stream started is one `data: {"error": ...}` event, then `[DONE]` (as vLLM).

The forwards run in a worker thread (one at a time, `Served.lock`); each generated token is sent as its
forward ends.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from glmcheck.serve.codec import TextWidths
from glmcheck.serve.engine import Generation, Scored, Served, ServerStopping, Stop
from glmcheck.serve.schemas import error_body

DONE = "data: [DONE]\n\n"


def event(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


@dataclass
class Progress:
    """One choice's stream so far: what was sent of its text, how many output tokens, the widths of its run."""

    widths: TextWidths
    sent_text: str = ""
    sent_tokens: int = 0
    started: bool = False


@dataclass(frozen=True)
class Step:
    """A snapshot the worker thread hands over: choice `index`, its scored prompt, output and text so far,
    and for the last one (`done`) why it ended."""

    index: int
    prompt: list[Scored]
    output: list[Scored]
    text: str
    done: bool = False
    finish: str | None = None
    matched: str | int | None = None


@dataclass
class Failure:
    error: BaseException


def safe_text(text: str, stop: Stop) -> str:
    """`text` less what may still change: a tail that could begin a stop string, an incomplete character."""
    hold = max((len(s) for s in stop.strings), default=1) - 1
    if hold:
        text = text[:max(len(text) - hold, 0)]
    return text.rstrip("\ufffd")


async def steps(served: Served, jobs: list[dict]) -> AsyncIterator[Step | Failure]:
    """Run `jobs` (keyword arguments of `Served.generate`) in a worker thread, yielding each token's Step."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def put(item: Step | Failure | None) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def snapshot(index: int) -> Callable[[Generation], None]:
        return lambda g: put(Step(index, list(g.prompt), list(g.output), g.text))

    def work() -> None:
        try:
            for index, job in enumerate(jobs):
                g = served.generate(**job, on_token=snapshot(index))
                put(Step(index, list(g.prompt), list(g.output), g.text, True, g.finish, g.matched))
        except BaseException as err:  # noqa: BLE001 - sent as the stream's error event
            put(Failure(err))
        finally:
            put(None)

    threading.Thread(target=work, name="glmcheck-stream", daemon=True).start()
    while (item := await queue.get()) is not None:
        yield item


@dataclass
class StreamShape:
    """What differs between the two APIs' chunks: the object name, the id and each choice's payload."""

    object: str
    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def chunk(self, choices: list[dict], **extra) -> dict:
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                "choices": choices, **extra}


def error_event(err: BaseException) -> str:
    status = 503 if isinstance(err, ServerStopping) else 500
    text = str(err).strip() or type(err).__name__
    return event(error_body(status, text.splitlines()[0]))
