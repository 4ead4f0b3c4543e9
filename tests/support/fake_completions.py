"""A fake completions server for the endpoint tests: one next-token distribution whichever protocol (OpenAI
completions or SGLang /generate) serves it, as httpx.MockTransport routes or as a real uvicorn app in a thread."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
from fastapi import Request

from glmcheck.sources.endpoint import Endpoint
from glmcheck.sources.transport import EndpointError

MODEL = "glm-test"
URL = "http://mock.test"
OPENAI = Endpoint("a", URL, "openai", MODEL)
SGLANG = Endpoint("s", URL, "sglang")


# ---- a fake model: the same distribution whichever protocol serves it ------------------------------

def fake_top(prompt, position: int, k: int) -> list[tuple[str, float, int]]:
    """(text, logprob, id) of the top-k at `position`, most likely first."""
    seed = len(prompt)
    return [(f"t{seed}.{position}.{j}", -0.1 - 0.5 * j - 0.01 * position, 1000 * position + j) for j in range(k)]


def openai_answer(prompt, n: int, k: int, *, extra: int = 0, finish: str = "length") -> dict:
    """A /v1/completions body; each top_logprobs dict lists the least likely first (order must not matter)."""
    tops = [fake_top(prompt, i, k + extra) for i in range(n)]
    tokens = [top[0][0] for top in tops]
    return {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": "".join(tokens), "finish_reason": finish,
                         "logprobs": {"tokens": tokens, "token_logprobs": [top[0][1] for top in tops],
                                      "text_offset": list(range(n)),
                                      "top_logprobs": [{t: lp for t, lp, _ in reversed(top)} for top in tops]}}]}


def sglang_answer(prompt, n: int, k: int) -> dict:
    tops = [fake_top(prompt, i, k) for i in range(n)]
    return {"text": "".join(top[0][0] for top in tops),
            "meta_info": {"id": "r1", "finish_reason": {"type": "length", "length": n},
                          "output_token_logprobs": [[top[0][1], top[0][2], top[0][0]] for top in tops],
                          "output_top_logprobs": [[[lp, i, t] for t, lp, i in top] for top in tops]}}


def fake_dist(length: int, position: int, k: int) -> list[tuple[str, float, int]]:
    """(text, logprob, id) of the top-k at prompt position `position` of a `length`-token prompt (the
    distribution predicting token position + 1): each text names its position, `w{length}.{position}.{j}`."""
    return [(f"w{length}.{position}.{j}", -0.2 - 0.4 * j - 0.001 * position, 100 * position + j) for j in range(k)]


def window_expected(length: int, width: int, k: int) -> list[tuple[tuple[str, float], ...]]:
    """The window a correct client returns: positions length - width .. length - 1, most likely first."""
    return [tuple((t, lp) for t, lp, _ in fake_dist(length, p, k)) for p in range(length - width, length)]


def openai_echo_answer(ids: list[int], k: int) -> dict:
    """A /v1/completions answer with echo and max_tokens 1, as vLLM counts it: entry 0 null, entry j
    (1 <= j < L) position j - 1's top-k plus the prompt token itself, entry L the generated token's."""
    length = len(ids)
    tops = [None] + [{**{t: lp for t, lp, _ in reversed(fake_dist(length, j - 1, k))}, f"id{ids[j]}": -30.0 - j}
                     for j in range(1, length)] + [{t: lp for t, lp, _ in fake_dist(length, length - 1, k)}]
    generated = fake_dist(length, length - 1, k)[0]
    tokens = [f"id{i}" for i in ids] + [generated[0]]
    return {"id": "cmpl-echo", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": "".join(tokens), "finish_reason": "length",
                         "logprobs": {"tokens": tokens, "token_logprobs": [None] + [-30.0 - j for j in range(1, length)]
                                      + [generated[1]], "text_offset": list(range(length + 1)), "top_logprobs": tops}}]}


def sglang_window_answer(ids: list[int], k: int, start: int) -> dict:
    """A /generate answer with max_new_tokens 1 and logprob_start_len `start`, as SGLang counts it:
    input_top_logprobs [null, position start, ..., position L - 2], output_top_logprobs [position L - 1]."""
    length = len(ids)
    start = length - 1 if start == -1 else start
    def triples(dist):
        return [[lp, i, t] for t, lp, i in dist]

    generated = fake_dist(length, length - 1, k)[0]
    return {"text": generated[0],
            "meta_info": {"id": "r-window", "finish_reason": {"type": "length", "length": 1},
                          "input_token_logprobs": [[None, ids[start], f"id{ids[start]}"]]
                          + [[-30.0 - p, ids[p], f"id{ids[p]}"] for p in range(start + 1, length)],
                          "output_token_logprobs": [[generated[1], generated[2], generated[0]]],
                          "input_top_logprobs": [None] + [triples(fake_dist(length, p, k))
                                                          for p in range(start, length - 1)],
                          "output_top_logprobs": [triples(fake_dist(length, length - 1, k))]}}


def answer_for(request_body: dict) -> dict:
    if "logprob_start_len" in request_body:
        return sglang_window_answer(request_body["input_ids"], request_body["top_logprobs_num"],
                                    request_body["logprob_start_len"])
    if request_body.get("echo"):
        return openai_echo_answer(request_body["prompt"], request_body["logprobs"])
    if "sampling_params" in request_body:
        prompt = request_body.get("text", request_body.get("input_ids"))
        return sglang_answer(prompt, request_body["sampling_params"]["max_new_tokens"],
                             request_body["top_logprobs_num"])
    return openai_answer(request_body["prompt"], request_body["max_tokens"], request_body["logprobs"])


MODELS = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm", "max_model_len": 4096}]}


def mock(routes: dict, calls: list | None = None) -> httpx.MockTransport:
    """A transport answering (method, path) or path from `routes`: a JSON value, an httpx.Response, an
    exception to raise, or a function of the request giving one of those; 404 for other paths."""
    calls = [] if calls is None else calls

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        calls.append((request.method, request.url.path, body))
        answer = routes.get((request.method, request.url.path), routes.get(request.url.path))
        if callable(answer) and not isinstance(answer, httpx.Response):
            answer = answer(request)
        if answer is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)

    return httpx.MockTransport(handler)


def completing(extra: dict | None = None) -> dict:
    """Routes of a healthy server of both protocols (`extra` added or replacing)."""
    def post(request: httpx.Request) -> dict:
        return answer_for(json.loads(request.content))

    return {"/v1/models": MODELS, "/version": {"version": "0.9.test"}, ("POST", "/v1/completions"): post,
            ("POST", "/generate"): post, **(extra or {})}


class LiveServer:
    """A FastAPI app speaking both protocols, served by uvicorn in a thread on a free port."""

    def __init__(self):
        import uvicorn
        from fastapi import FastAPI

        self.requests = 0
        app = FastAPI()
        app.get("/v1/models")(lambda: MODELS)
        app.get("/version")(lambda: {"version": "live"})

        async def answer(request: Request):
            body = await request.json()
            self.requests += 1
            if body.get("prompt", body.get("text")) == "slow":
                await asyncio.sleep(1.0)
            return answer_for(body)

        app.post("/v1/completions")(answer)
        app.post("/generate")(answer)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off",
                                                    timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.server.started, "the test server did not start"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


def raises_one_line(match: str, call, *args, **kwargs) -> EndpointError:
    """The EndpointError `call` raises, asserted to match `match`, be one line and be a ValueError."""
    with pytest.raises(EndpointError, match=match) as err:
        call(*args, **kwargs)
    message = str(err.value)
    assert "\n" not in message and isinstance(err.value, ValueError)
    return err.value
