"""glmcheck.sources: endpoint parsing, both completion protocols, every EndpointError, retries,
bounded concurrency; against httpx.MockTransport and against a real uvicorn server in a thread."""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from fastapi import Request

from glmcheck.sources import completions, transport, window
from glmcheck.sources import endpoint as endpoints
from glmcheck.sources.completions import Completion, complete, complete_many
from glmcheck.sources.endpoint import Endpoint, ServerInfo, check_same_model, describe, parse_endpoint, parse_endpoints
from glmcheck.sources.transport import EndpointError, HttpOptions, run_bounded
from glmcheck.sources.window import prompt_window, prompt_windows
from tests.support.servers import MODEL as SERVE_MODEL
from tests.support.servers import Servers

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
                          "input_top_logprobs": [None] + [triples(fake_dist(length, p, k)) for p in range(start, length - 1)],
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
    post = lambda request: answer_for(json.loads(request.content))
    return {"/v1/models": MODELS, "/version": {"version": "0.9.test"}, ("POST", "/v1/completions"): post,
            ("POST", "/generate"): post, **(extra or {})}


@pytest.fixture
def pauses(monkeypatch) -> list[float]:
    """The pauses between attempts, recorded instead of slept."""
    seen: list[float] = []
    monkeypatch.setattr(transport, "_pause", seen.append)
    return seen


# ---- parsing ---------------------------------------------------------------------------------------

def test_parse_endpoint_forms_round_trip():
    cases = {
        "vllm=http://127.0.0.1:8000": Endpoint("vllm", "http://127.0.0.1:8000"),
        "v=http://host:8000/v1/": Endpoint("v", "http://host:8000"),
        "s=sglang+https://gpu-7:30000#zai-org/GLM-5": Endpoint("s", "https://gpu-7:30000", "sglang", "zai-org/GLM-5"),
        "o.1=openai+http://h/prefix": Endpoint("o.1", "http://h/prefix"),
        "six=http://[::1]:9": Endpoint("six", "http://[::1]:9"),
    }
    for text, expected in cases.items():
        parsed = parse_endpoint(text)
        assert parsed == expected, text
        assert parse_endpoint(parsed.spec()) == parsed
    assert [e.name for e in parse_endpoints(["a=http://x", "b=http://x"])] == ["a", "b"]


@pytest.mark.parametrize("text, words", [
    ("http://x:8000", "has no '='"),
    ("=http://x", "name before '=' is empty"),
    ("a b=http://x", "name 'a b' must be letters"),
    ("a=ftp://x", "must start with http:// or https://"),
    ("a=x:8000", "must start with http:// or https://"),
    ("a=grpc+http://x", "protocol 'grpc' must be one of openai, sglang"),
    ("a=http://", "has no host"),
    ("a=http://x:port", "is not a URL"),
    ("a=http://x?q=1", "no query"),
    ("a=http://x#", "model after '#' is empty"),
    ("a=http://u:p@x", "no user or password"),
])
def test_parse_endpoint_errors_name_the_option(text, words):
    with pytest.raises(ValueError, match="--endpoint") as err:
        parse_endpoint(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_duplicate_endpoint_names():
    with pytest.raises(ValueError, match=r"--endpoint name 'a' is given twice \(a=http://x and a=http://y\)"):
        parse_endpoints(["a=http://x", "b=http://z", "a=http://y"])


def test_parsing_imports_no_http_library():
    code = ("import sys; from glmcheck.sources import parse_endpoints; parse_endpoints(['a=http://x']); "
            "assert 'httpx' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the two protocols -----------------------------------------------------------------------------

def test_openai_request_and_top_k_order():
    calls = []
    got = complete(OPENAI, "Hello", 3, 4, transport=mock(completing(), calls))
    (method, path, body), = calls
    assert (method, path) == ("POST", "/v1/completions")
    assert body == {"model": MODEL, "prompt": "Hello", "max_tokens": 3, "temperature": 0, "logprobs": 4,
                    "echo": False, "ignore_eos": True}
    expected = [fake_top("Hello", i, 4) for i in range(3)]
    assert got.tokens == tuple(top[0][0] for top in expected)
    assert got.logprobs == tuple(top[0][1] for top in expected)
    assert got.top == tuple(tuple((t, lp) for t, lp, _ in top) for top in expected)  # most likely first
    assert got.text == "".join(got.tokens) and got.k == 4 and got.model == MODEL and got.finish_reason == "length"
    nxt = got.next_token()
    assert (nxt.token, nxt.second, nxt.generated) == ("t5.0.0", "t5.0.1", "t5.0.0")
    assert nxt.logprob == pytest.approx(-0.1) and nxt.gap == pytest.approx(0.5)
    assert nxt.logprob_of("t5.0.2") == (pytest.approx(-1.1), pytest.approx(-1.6))
    assert nxt.logprob_of("absent") == (None, pytest.approx(-1.6))  # the k-th logprob bounds it
    assert got.next_token(2).token == "t5.2.0"
    with pytest.raises(ValueError, match=r"position must be in \[0, 3\)"):
        got.next_token(3)


def test_openai_k_plus_one_entries_bound_is_the_kth():
    answer = openai_answer("Hi", 1, 2, extra=1)  # the server added the generated token: k + 1 entries
    got = complete(OPENAI, "Hi", 1, 2, transport=mock(completing({("POST", "/v1/completions"): answer})))
    nxt = got.next_token()
    assert len(nxt.top) == 3
    assert nxt.logprob_of("t2.0.2") == (pytest.approx(-1.1), pytest.approx(-0.6))
    assert nxt.logprob_of("absent")[1] == pytest.approx(-0.6)


def test_sglang_request_and_parse():
    calls = []
    got = complete(SGLANG, [1, 2, 3], 2, 3, transport=mock(completing(), calls))
    (method, path, body), = calls
    assert (method, path) == ("POST", "/generate")
    assert body == {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2, "temperature": 0,
                                                                "ignore_eos": True},
                    "return_logprob": True, "top_logprobs_num": 3, "return_text_in_logprobs": True}
    assert got.token_ids == (0, 1000) and got.finish_reason == "length" and got.model is None
    complete(SGLANG, "text prompt", 1, 1, transport=mock(completing(), calls))
    assert calls[-1][2]["text"] == "text prompt" and "input_ids" not in calls[-1][2]


def test_both_protocols_normalise_alike():
    a = complete(OPENAI, "same", 4, 5, transport=mock(completing()))
    b = complete(SGLANG, "same", 4, 5, transport=mock(completing()))
    assert (a.tokens, a.logprobs, a.top, a.text) == (b.tokens, b.logprobs, b.top, b.text)
    assert a.next_token(1) == b.next_token(1)


def test_completion_record_round_trip():
    got = complete(SGLANG, "x", 2, 2, transport=mock(completing()))
    record = json.loads(json.dumps(got.to_record()))
    assert Completion.from_record(record) == got
    with pytest.raises(ValueError, match="needs the field 'top'"):
        Completion.from_record({k: v for k, v in record.items() if k != "top"})


def test_unordered_and_nan_logprobs_rank():
    answer = openai_answer("p", 1, 3)
    answer["choices"][0]["logprobs"]["top_logprobs"] = [{"b": -2.0, "nan": math.nan, "a": -0.5, "c": -2.0}]
    response = httpx.Response(200, content=json.dumps(answer).encode())  # NaN: Python's json, not strict JSON
    got = complete(OPENAI, "p", 1, 3, transport=mock({"/v1/completions": response}))
    assert [t for t, _ in got.top[0]] == ["a", "b", "c", "nan"]  # ties keep the server's order, NaN last


# ---- errors ----------------------------------------------------------------------------------------

def raises_one_line(match: str, call, *args, **kwargs) -> EndpointError:
    with pytest.raises(EndpointError, match=match) as err:
        call(*args, **kwargs)
    message = str(err.value)
    assert "\n" not in message and isinstance(err.value, ValueError)
    return err.value


def test_unreachable_retried_with_backoff_then_gives_up(pauses):
    calls = []
    refused = lambda request: httpx.ConnectError("[Errno 111] Connection refused", request=request)
    err = raises_one_line(r"^endpoint a \(http://mock.test\): POST /v1/completions: server unreachable "
                          r"\(ConnectError: \[Errno 111\] Connection refused\) after 4 attempts$",
                          complete, OPENAI, "x", 1, 1, transport=mock({"/v1/completions": refused}, calls))
    assert err.status is None and len(calls) == 4 and pauses == [0.5, 1.0, 2.0]
    calls.clear(), pauses.clear()
    raises_one_line("after 1 attempt$", complete, OPENAI, "x", 1, 1, options=HttpOptions(retries=0),
                    transport=mock({"/v1/completions": refused}, calls))
    assert len(calls) == 1 and pauses == []


def test_closed_client_does_not_retry(pauses):
    def closing(request):
        http.close()  # as complete_many does when its caller stops early
        return httpx.ReadError("connection closed", request=request)

    http = OPENAI.connect(transport=mock({"/v1/completions": closing}))
    raises_one_line(r"POST /v1/completions: abandoned \(the client is closed\)$", http.post, "/v1/completions", {})
    assert pauses == []


def test_connection_lost_is_retried(pauses):
    calls = []
    answers = [lambda r: httpx.RemoteProtocolError("Server disconnected without sending a response", request=r),
               lambda r: answer_for(json.loads(r.content))]
    got = complete(OPENAI, "x", 1, 1, transport=mock({"/v1/completions": lambda r: answers[len(calls) - 1](r)},
                                                      calls))
    assert got.tokens == ("t1.0.0",) and pauses == [0.5]
    raises_one_line(r"connection lost \(ReadError: reset\) after 4 attempts$", complete, OPENAI, "x", 1, 1,
                    transport=mock({"/v1/completions": lambda r: httpx.ReadError("reset", request=r)}))


def test_retry_status_then_success(pauses):
    answers = [httpx.Response(503, json={"message": "loading"}),
               httpx.Response(429, headers={"Retry-After": "3"}, json={"error": {"message": "slow down"}}),
               httpx.Response(200, json=openai_answer("x", 1, 1))]
    calls = []
    got = complete(OPENAI, "x", 1, 1, transport=mock({"/v1/completions": lambda r: answers[len(calls) - 1]}, calls))
    assert got.tokens == ("t1.0.0",) and len(calls) == 3 and pauses == [0.5, 3.0]


@pytest.mark.parametrize("status", [502, 503, 504, 429])
def test_retry_status_gives_up(pauses, status):
    calls = []
    err = raises_one_line(rf"POST /v1/completions answered HTTP {status}: busy after 4 attempts$", complete,
                          OPENAI, "x", 1, 1, transport=mock({"/v1/completions": httpx.Response(
                              status, json={"detail": "busy"})}, calls))
    assert err.status == status and len(calls) == 4 and len(pauses) == 3


@pytest.mark.parametrize("status, body, shown", [
    (400, {"object": "error", "message": "logprobs 50 > max 20", "code": 400}, "logprobs 50 > max 20"),  # vLLM
    (400, {"error": {"message": "bad prompt", "type": "BadRequestError"}}, "bad prompt"),  # OpenAI / newer vLLM
    (404, {"detail": "Not Found"}, "Not Found"),  # FastAPI
    (422, {"detail": [{"loc": ["body", "prompt"], "msg": "field required"}]}, "field required"),
    (500, "Traceback (most recent call last):\n  File x\nRuntimeError: CUDA error\n" + "x" * 500, "Traceback"),
])
def test_other_http_errors_not_retried_and_quoted(pauses, status, body, shown):
    response = httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)
    calls = []
    err = raises_one_line(rf"^endpoint a \(http://mock.test\): POST /v1/completions answered HTTP {status}: ",
                          complete, OPENAI, "x", 1, 1, transport=mock({"/v1/completions": response}, calls))
    assert shown in str(err) and len(calls) == 1 and pauses == [] and err.status == status
    assert len(str(err)) < 300  # the body is cut


def test_malformed_json(pauses):
    raises_one_line(r"POST /generate answered HTTP 200 with a body that is not JSON: '<html>oops'", complete,
                    SGLANG, "x", 1, 1, transport=mock({"/generate": httpx.Response(200, text="<html>oops")}))


def _drop(path: list, value=KeyError):
    """An openai answer with the field at `path` removed (value KeyError) or replaced."""
    answer = openai_answer("x", 2, 2)
    node = answer
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return answer


@pytest.mark.parametrize("answer, words", [
    (_drop(["choices"]), "has no choices"),
    (_drop(["choices"], []), "has no choices[0]"),
    (_drop(["choices", 0, "logprobs"], None), "choices[0].logprobs (the server returned no logprobs) of type null"),
    (_drop(["choices", 0, "logprobs", "top_logprobs"]), "has no choices[0].logprobs.top_logprobs"),
    (_drop(["choices", 0, "logprobs", "top_logprobs", 1], None), "top_logprobs[1] of type null"),
    (_drop(["choices", 0, "logprobs", "token_logprobs"], [-0.1]), "2 tokens, 1 token_logprobs and 2 top_logprobs"),
    (_drop(["choices", 0, "logprobs", "token_logprobs", 0], "x"), "token_logprobs[0] of type str, expected a number"),
    (_drop(["choices", 0, "text"], None), "choices[0].text of type null, expected a string"),
    ([1, 2], "has no choices"),
])
def test_openai_missing_fields(answer, words):
    err = raises_one_line("POST /v1/completions answered a body that ", complete, OPENAI, "x", 2, 2,
                          transport=mock({"/v1/completions": answer}))
    assert words in str(err)


@pytest.mark.parametrize("edit, words", [
    (lambda a: a.pop("meta_info"), "has no meta_info"),
    (lambda a: a["meta_info"].pop("output_top_logprobs"), "output_top_logprobs (top_logprobs_num ignored?)"),
    (lambda a: a["meta_info"]["output_token_logprobs"][0].__setitem__(2, None), "return_text_in_logprobs"),
    (lambda a: a["meta_info"]["output_top_logprobs"][1].__setitem__(0, [0.1, 2]), "not [logprob, token_id, text]"),
])
def test_sglang_missing_fields(edit, words):
    answer = sglang_answer("x", 2, 2)
    edit(answer)
    err = raises_one_line("POST /generate answered a body that ", complete, SGLANG, "x", 2, 2,
                          transport=mock({"/generate": answer}))
    assert words in str(err)


def test_fewer_logprobs_than_asked():
    capped = openai_answer("x", 2, 5)
    capped["choices"][0]["logprobs"]["top_logprobs"][1] = dict(list(
        capped["choices"][0]["logprobs"]["top_logprobs"][1].items())[:3])
    raises_one_line(r"returned 3 top logprobs at generated position 1, asked 5 \(the server may cap them",
                    complete, OPENAI, "x", 2, 5, transport=mock({"/v1/completions": capped}))
    raises_one_line("returned 2 top logprobs at generated position 0, asked 3", complete, SGLANG, "x", 1, 3,
                    transport=mock({"/generate": sglang_answer("x", 1, 2)}))


def test_fewer_tokens_than_asked():
    stop, length = openai_answer("x", 2, 1, finish="stop"), openai_answer("x", 2, 1, finish="length")
    raises_one_line(r"POST /v1/completions returned 2 tokens, asked 5 \(finish_reason 'stop'; ignore_eos=True\)",
                    complete, OPENAI, "x", 5, 1, transport=mock({"/v1/completions": stop}))
    raises_one_line(r"returned 2 tokens, asked 5 \(finish_reason 'length'; ignore_eos=False\)", complete, OPENAI,
                    "x", 5, 1, ignore_eos=False, transport=mock({"/v1/completions": length}))
    raises_one_line(r"returned 2 tokens, asked 1 ", complete, OPENAI, "x", 1, 1, transport=mock(
        {"/v1/completions": length}))
    got = complete(OPENAI, "x", 5, 1, ignore_eos=False, transport=mock({"/v1/completions": stop}))  # an end of text
    assert len(got.tokens) == 2 and got.finish_reason == "stop"


def test_bad_arguments_are_value_errors():
    for kwargs, words in [({"max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
                          ({"logprobs": True}, "logprobs must be an integer >= 1, got True"),
                          ({"prompt": ""}, "prompt must be non-empty"),
                          ({"prompt": [1, -2]}, "list of token ids")]:
        args = {"prompt": "x", "max_tokens": 1, "logprobs": 1, **kwargs}
        with pytest.raises(ValueError, match=words):
            complete(OPENAI, args["prompt"], args["max_tokens"], args["logprobs"], transport=mock({}))
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0, got 0"):
        HttpOptions(timeout=0)
    with pytest.raises(ValueError, match="retries must be an integer >= 0"):
        HttpOptions(retries=-1)
    with pytest.raises(ValueError, match="concurrency must be an integer >= 1, got 0"):
        complete_many(OPENAI, {"a": "x"}, 1, 1, concurrency=0, transport=mock(completing()))  # at the call
    with pytest.raises(ValueError, match="logprobs must be an integer >= 1, got 0"):
        complete_many(OPENAI, {"a": "x"}, 1, 0)


# ---- describe and model checks -----------------------------------------------------------------------

def test_describe_records_what_answered():
    routes = {"/v1/models": {"data": [{"id": MODEL, "owned_by": "sglang", "max_model_len": 8192}]},
              "/version": None, "/server_info": httpx.Response(500, text="boom"),
              "/get_server_info": {"version": "0.5.1", "tp_size": 8},
              "/glmcheck/info": {"backend": "triton_sparse_mla", "config_hash": "abc"}}
    info = describe(Endpoint("s", URL, "sglang"), transport=mock(routes))
    assert (info.model, info.models, info.owned_by, info.max_model_len, info.version) == (
        MODEL, [MODEL], "sglang", 8192, "0.5.1")
    assert info.endpoint == Endpoint("s", URL, "sglang", MODEL)
    assert info.glmcheck == {"backend": "triton_sparse_mla", "config_hash": "abc"}
    assert info.probes == {"/v1/models": "ok", "/version": "answered HTTP 404: Not Found",
                           "/server_info": "answered HTTP 500: boom", "/get_server_info": "ok",
                           "/glmcheck/info": "ok"}
    assert json.loads(json.dumps(info.to_record()))["probes"] == info.probes
    plain = describe(Endpoint("v", URL), transport=mock(completing()))
    assert plain.version == "0.9.test" and plain.glmcheck is None and list(plain.probes) == [
        "/v1/models", "/version", "/glmcheck/info"]


def test_describe_sglang_without_v1_models():
    info = describe(SGLANG, transport=mock({"/get_model_info": {"model_path": "/models/glm"}}))
    assert info.model == "/models/glm" and info.probes["/v1/models"] == "answered HTTP 404: Not Found"


def test_describe_model_choice_errors():
    two = {"/v1/models": {"data": [{"id": "m1"}, {"id": "m2"}]}}
    raises_one_line(r"^endpoint v \(http://mock.test\): serves 2 models \('m1', 'm2'\); name it with NAME=URL#MODEL",
                    describe, Endpoint("v", URL), transport=mock(two))
    assert describe(Endpoint("v", URL, model="m2"), transport=mock(two)).model == "m2"
    raises_one_line(r"serves 2 models \('m1', 'm2'\), not the model 'm3' asked for", describe,
                    Endpoint("v", URL, model="m3"), transport=mock(two))
    raises_one_line(r"serves no model", describe, Endpoint("v", URL), transport=mock({"/v1/models": {"data": []}}))
    raises_one_line(r"GET /v1/models answered without a list of models", describe, Endpoint("v", URL),
                    transport=mock({"/v1/models": {"models": ["m"]}}))
    raises_one_line(r"cannot tell which model it serves \(GET /v1/models: answered HTTP 404", describe,
                    Endpoint("v", URL), transport=mock({}))
    assert describe(Endpoint("v", URL, model="named"), transport=mock({})).model == "named"


def test_describe_unreachable(pauses):
    down = {"/v1/models": lambda r: httpx.ConnectError("[Errno 111] Connection refused", request=r)}
    raises_one_line(r"GET /v1/models: server unreachable .* after 4 attempts", describe, OPENAI,
                    transport=mock(down))


def test_complete_asks_the_model_when_not_named():
    calls = []
    complete(Endpoint("v", URL), "x", 1, 1, transport=mock(completing(), calls))
    assert calls[0][:2] == ("GET", "/v1/models") and calls[-1][2]["model"] == MODEL


def test_check_same_model():
    a = ServerInfo(Endpoint("a", "http://h1", model="glm-5"), "glm-5", ["glm-5"])
    b = ServerInfo(Endpoint("b", "http://h2", model="glm-5"), "glm-5", ["glm-5"])
    c = ServerInfo(Endpoint("c", "http://h3", model="glm-4"), "glm-4", ["glm-4"])
    check_same_model([a, b])
    check_same_model([])
    raises_one_line(r"^--endpoint a \(http://h1\) serves model 'glm-5' but c \(http://h3\) serves 'glm-4'",
                    check_same_model, [a, b, c])


# ---- concurrency -----------------------------------------------------------------------------------------

def test_complete_many_bounded_and_yields_each_once():
    lock, state = threading.Lock(), {"now": 0, "most": 0}

    def slow(request):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= 1
        return answer_for(json.loads(request.content))

    prompts = {f"p{i}": "x" * (i + 1) for i in range(12)}
    got = dict(complete_many(OPENAI, prompts, 2, 2, concurrency=3, transport=mock({"/v1/completions": slow})))
    assert sorted(got) == sorted(prompts) and state["most"] == 3
    assert all(got[key].tokens[0] == f"t{len(p)}.0.0" for key, p in prompts.items())
    with pytest.raises(ValueError, match="prompt key 'a' is given twice"):
        list(complete_many(OPENAI, [("a", "x"), ("a", "y")], 1, 1, transport=mock(completing())))


def test_complete_many_stops_starting_after_an_error():
    calls = []

    def answer(request):
        body = json.loads(request.content)
        if body["prompt"] == "bad":
            return httpx.Response(400, json={"message": "no"})
        time.sleep(0.05)
        return answer_for(body)

    prompts = [("ok1", "a"), ("bad", "bad"), ("ok2", "bb")] + [(f"later{i}", "c") for i in range(10)]
    done = []
    with pytest.raises(EndpointError, match="answered HTTP 400: no"):
        for key, _ in complete_many(OPENAI, prompts, 1, 1, concurrency=3, transport=mock({"/v1/completions": answer},
                                                                                          calls)):
            done.append(key)
    assert sorted(done) == ["ok1", "ok2"] and len(calls) == 3  # those in flight finished; none started after


def test_run_bounded_raises_after_the_running_finish():
    def work(x):
        if x == 1:
            raise RuntimeError("one")
        time.sleep(0.05)
        return x * 10

    seen = []
    with pytest.raises(RuntimeError, match="one"):
        for key, value in run_bounded(work, [(i, i) for i in range(8)], concurrency=2):
            seen.append((key, value))
    assert seen == [(0, 0)]


# ---- prompt windows ----------------------------------------------------------------------------------------

IDS = [11, 12, 13, 14, 15]  # L = 5


def test_window_openai_request_and_positions():
    calls = []
    got = prompt_window(OPENAI, IDS, 3, 2, transport=mock(completing(), calls))
    (method, path, body), = calls
    assert (method, path) == ("POST", "/v1/completions")
    assert body == {"model": MODEL, "prompt": IDS, "max_tokens": 1, "temperature": 0, "logprobs": 2, "echo": True}
    # positions 2, 3, 4: echo entries 3 and 4 (each with the prompt token added, as vLLM) and the generated one
    assert [top[:2] for top in got] == window_expected(5, 3, 2)
    assert [len(top) for top in got] == [3, 3, 2] and got[0][2] == ("id14", -33.0)  # the k + 1-th: ranked last
    for width in (1, 5):  # the generated token's only; the whole prompt (entry 0, null, is never taken)
        assert [top[:2] for top in prompt_window(OPENAI, IDS, width, 2, transport=mock(completing()))] == \
            window_expected(5, width, 2)


def test_window_sglang_request_and_positions():
    calls = []
    got = prompt_window(SGLANG, IDS, 3, 2, transport=mock(completing(), calls))
    (method, path, body), = calls
    assert (method, path) == ("POST", "/generate")
    assert body == {"input_ids": IDS, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                    "return_logprob": True, "logprob_start_len": 2, "top_logprobs_num": 2,
                    "return_text_in_logprobs": True}
    assert got == window_expected(5, 3, 2)  # input_top_logprobs[1:] (positions 2, 3) + output_top_logprobs[0]
    for width in (1, 5):
        calls.clear()
        assert prompt_window(SGLANG, IDS, width, 2, transport=mock(completing(), calls)) == window_expected(5, width, 2)
        assert calls[0][2]["logprob_start_len"] == 5 - width


def _window_route(edit):
    """Routes answering each window request with the fake model's answer, then `edit(answer)` applied."""
    def answer(request):
        body = answer_for(json.loads(request.content))
        edit(body)
        return body
    return completing({("POST", "/v1/completions"): answer, ("POST", "/generate"): answer})


def _tops(answer):
    return answer["choices"][0]["logprobs"]["top_logprobs"]


@pytest.mark.parametrize("edit, words", [
    (lambda a: _tops(a).pop(),
     ("POST /v1/completions returned 5 choices[0].logprobs.top_logprobs entries for a 5-token prompt with echo, "
      "expected 6 (one per prompt token, the first null, then the generated token's; the window takes the last 3; "
      "echo ignored?)")),
    (lambda a: _tops(a).insert(0, None), "returned 7 choices[0].logprobs.top_logprobs entries"),
    (lambda a: _tops(a).__setitem__(3, None),
     ("POST /v1/completions answered null at choices[0].logprobs.top_logprobs[3], the distribution at prompt "
      "position 2 (window entry 0 of 3) that the window needs")),
    (lambda a: _tops(a).__setitem__(4, {"a": -0.1}),
     ("POST /v1/completions returned 1 top logprobs at prompt position 3 (window entry 1 of 3), asked 2 (the server "
      "may cap them")),
    (lambda a: _tops(a).__setitem__(5, [["x", -0.1]]),
     "answered a body that has choices[0].logprobs.top_logprobs[5] of type list, expected an object"),
    (lambda a: _tops(a).__setitem__(5, {"x": "-0.1"}),
     "has a logprob that is not a number in choices[0].logprobs.top_logprobs[5]"),
    (lambda a: a["choices"][0].__setitem__("logprobs", None),
     "choices[0].logprobs (the server returned no logprobs) of type null"),
], ids=["one-short", "one-extra", "null", "fewer-than-k", "not-a-dict", "not-a-number", "no-logprobs"])
def test_window_openai_errors(edit, words):
    err = raises_one_line(re.escape(words), prompt_window, OPENAI, IDS, 3, 2, transport=mock(_window_route(edit)))
    assert str(err).startswith("endpoint a (http://mock.test): POST /v1/completions ")


def _meta(answer):
    return answer["meta_info"]


@pytest.mark.parametrize("edit, words", [
    (lambda a: _meta(a)["input_top_logprobs"].insert(1, _meta(a)["input_top_logprobs"][1]),
     ("POST /generate returned 4 meta_info.input_top_logprobs entries for a 5-token prompt with logprob_start_len 2, "
      "expected 3 (a null, then positions 2 .. 3; logprob_start_len ignored?)")),
    (lambda a: a.update(sglang_window_answer(IDS, 2, 0)),  # a server scoring from 0 whatever the start
     "returned 5 meta_info.input_top_logprobs entries for a 5-token prompt with logprob_start_len 2, expected 3"),
    (lambda a: _meta(a)["output_top_logprobs"].clear(),
     "returned 0 meta_info.output_top_logprobs entries, expected 1 (max_new_tokens 1)"),
    (lambda a: _meta(a)["input_top_logprobs"].__setitem__(2, None),
     ("POST /generate answered null at meta_info.input_top_logprobs[2], the distribution at prompt position 3 "
      "(window entry 1 of 3) that the window needs")),
    (lambda a: _meta(a)["output_top_logprobs"][0].pop(),
     "returned 1 top logprobs at prompt position 4 (window entry 2 of 3), asked 2"),
    (lambda a: _meta(a).pop("input_top_logprobs"),
     "has no meta_info.input_top_logprobs (top_logprobs_num ignored?)"),
    (lambda a: _meta(a)["input_top_logprobs"][1][0].__setitem__(2, None),
     "meta_info.input_top_logprobs[1][0][2] (token text; the server ignored return_text_in_logprobs)"),
], ids=["one-extra", "start-ignored", "no-output", "null", "fewer-than-k", "no-input", "no-text"])
def test_window_sglang_errors(edit, words):
    err = raises_one_line(re.escape(words), prompt_window, SGLANG, IDS, 3, 2, transport=mock(_window_route(edit)))
    assert str(err).startswith("endpoint s (http://mock.test): POST /generate ")


def test_window_first_entry_is_not_checked():
    # the entry before the window (SGLang's pad, the echo's first token) may be anything
    def fill(answer):
        _meta(answer)["input_top_logprobs"][0] = [[-0.5, 1, "pad"]]

    assert prompt_window(SGLANG, IDS, 3, 2, transport=mock(_window_route(fill))) == window_expected(5, 3, 2)


def test_window_bad_arguments_are_value_errors():
    transport = mock(completing())
    for args, words in [((IDS, 0, 2), r"window must be an integer in \[1, 5\] \(the prompt's 5 tokens\), got 0"),
                        ((IDS, 6, 2), r"window must be an integer in \[1, 5\] .* got 6"),
                        ((IDS, True, 2), r"window must be .* got True"),
                        ((IDS, 2, 0), "logprobs must be an integer >= 1, got 0"),
                        (("text", 1, 2), "token_ids must be a non-empty list of token ids"),
                        (([], 1, 2), "token_ids must be a non-empty list"),
                        (([1, -1], 1, 2), "token_ids must be a non-empty list")]:
        with pytest.raises(ValueError, match=words):
            prompt_window(OPENAI, *args, transport=transport)
    with pytest.raises(ValueError, match="window must be an integer >= 1, got 0"):
        prompt_windows(OPENAI, {"a": IDS}, 0, 2)  # at the call
    with pytest.raises(ValueError, match="concurrency must be an integer >= 1, got 0"):
        prompt_windows(OPENAI, {"a": IDS}, 1, 2, concurrency=0)
    with pytest.raises(ValueError, match=r"window must be an integer in \[1, 2\] .* got 3"):
        list(prompt_windows(OPENAI, [("a", IDS), ("short", [1, 2])], 3, 2, concurrency=1, transport=transport))
    with pytest.raises(ValueError, match="prompt key 'a' is given twice"):
        list(prompt_windows(SGLANG, [("a", IDS), ("a", IDS)], 3, 2, transport=transport))


def test_prompt_windows_over_lengths_both_protocols():
    prompts = {f"L{n}": list(range(1, n + 1)) for n in range(3, 10)}  # a length sweep, window 3
    calls = []
    a = dict(prompt_windows(Endpoint("v", URL), prompts, 3, 4, concurrency=3, transport=mock(completing(), calls)))
    b = dict(prompt_windows(SGLANG, prompts.items(), 3, 4, concurrency=2, transport=mock(completing())))
    assert sorted(a) == sorted(b) == sorted(prompts)
    for key, ids in prompts.items():
        assert [top[:4] for top in a[key]] == b[key] == window_expected(len(ids), 3, 4)
    assert [c[:2] for c in calls].count(("GET", "/v1/models")) == 1  # the model asked once


# ---- a real server over real sockets ---------------------------------------------------------------------

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


@pytest.fixture(scope="module")
def live():
    server = LiveServer()
    yield server
    server.stop()


def test_live_both_protocols(live):
    info = describe(parse_endpoint(f"v={live.url}/v1"))
    assert (info.model, info.version, info.owned_by) == (MODEL, "live", "vllm")
    prompts = {f"p{i}": "y" * (i + 1) for i in range(6)}
    a = dict(complete_many(info.endpoint, prompts, 3, 4, concurrency=4))
    b = dict(complete_many(parse_endpoint(f"s=sglang+{live.url}"), prompts, 3, 4, concurrency=2))
    assert sorted(a) == sorted(b) == sorted(prompts)
    for key, prompt in prompts.items():
        assert (a[key].tokens, a[key].top) == (b[key].tokens, b[key].top)
        assert a[key].next_token().token == f"t{len(prompt)}.0.0"


def test_live_windows(live):
    prompts = {f"L{n}": list(range(7, 7 + n)) for n in (2, 4, 6)}
    a = dict(prompt_windows(parse_endpoint(f"v={live.url}"), prompts, 2, 3, concurrency=3))
    b = dict(prompt_windows(parse_endpoint(f"s=sglang+{live.url}"), prompts, 2, 3))
    for key, ids in prompts.items():
        assert [top[:3] for top in a[key]] == b[key] == window_expected(len(ids), 2, 3)


def test_live_timeout_is_not_retried(live, pauses):
    before = live.requests
    raises_one_line(r"POST /v1/completions: no answer within 0.2 s \(the timeout; ReadTimeout\)", complete,
                    Endpoint("v", live.url, model=MODEL), "slow", 1, 1, options=HttpOptions(timeout=0.2))
    assert pauses == [] and live.requests == before + 1  # asked once: a slow server is not asked again


def test_live_early_stop_returns_at_once(live):
    prompts = [("fast", "f")] + [(f"slow{i}", "slow") for i in range(3)]
    for key, _ in complete_many(Endpoint("v", live.url, model=MODEL), prompts, 1, 1, concurrency=4):
        assert key == "fast"
        stopped = time.monotonic()
        break
    assert time.monotonic() - stopped < 0.5  # the slow ones (1 s) are left to end on their own


def test_live_server_dies_mid_run(pauses):
    server = LiveServer()
    ep = Endpoint("v", server.url, model=MODEL)
    done = []
    try:
        with pytest.raises(EndpointError, match=r"^endpoint v \(http://127\.0\.0\.1:\d+\): POST /v1/completions: "
                                                r"server unreachable \(ConnectError: .*\) after 4 attempts$"):
            for key, completion in complete_many(ep, {f"p{i}": "z" for i in range(8)}, 1, 1, concurrency=1):
                done.append(key)
                if len(done) == 2:
                    server.stop()
    finally:
        server.stop()
    assert 2 <= len(done) <= 3 and len(pauses) == 3  # what finished was yielded; then the retries gave up
    raises_one_line("GET /v1/models: server unreachable", describe, Endpoint("v", server.url))


# ---- a real `glmcheck serve` process against the in-process harness --------------------------------------

@pytest.fixture(scope="module")
def glmcheck_serve():
    """(URL, model, tokenizer): a `glmcheck serve --model ref-cpu --backend reference --device cpu --port 0`
    process, and the same model built here with its tokenizer. SIGTERM at the end."""
    import torch

    from glmcheck.data.model_tokenizer import model_tokenizer
    from glmcheck.model.load import ModelSpec, load_model

    servers = Servers()
    try:
        servers.start({"server": "reference"}, timeout=120, args=("--device", "cpu"))
        spec = ModelSpec(preset=SERVE_MODEL)
        model = load_model(spec, torch.device("cpu")).eval()
        yield servers.urls["server"], model, model_tokenizer(spec, model.config.vocab_size)
    finally:
        servers.stop_all()


def test_glmcheck_serve_window_equals_the_harness(glmcheck_serve):
    import torch

    from glmcheck.checks.runner import SwapOptions, forward_under

    url, model, tokenizer = glmcheck_serve
    ids = tokenizer.encode("The quick brown fox")
    length, k = len(ids), 5
    for width in (3, length):
        a = prompt_window(parse_endpoint(f"v={url}"), ids, width, k)
        b = prompt_window(parse_endpoint(f"s=sglang+{url}"), ids, width, k)
        run = forward_under(model, torch.tensor([ids]), "reference", SwapOptions(), last_logits=width)
        logprobs = torch.log_softmax(run.captured.logits[0].double(), dim=-1)  # positions length - width ..
        assert len(a) == len(b) == logprobs.shape[0] == width
        for i, row in enumerate(logprobs):
            values, indices = torch.topk(row, k)
            want = [(tokenizer.token_text(int(t)), float(v)) for t, v in zip(indices, values)]
            for got in (a[i], b[i]):
                assert [t for t, _ in got[:k]] == [t for t, _ in want], (width, i)
                assert max(abs(g - w) for (_, g), (_, w) in zip(got[:k], want)) <= 1e-9, (width, i)
            if length - width + i + 1 < length:  # the echo adds the prompt token this position predicts
                token = ids[length - width + i + 1]
                assert dict(a[i])[tokenizer.token_text(token)] == pytest.approx(float(row[token]), abs=1e-9)


def test_modules_stay_small():
    import pathlib

    for module in (endpoints, completions, transport, window):
        assert len(pathlib.Path(module.__file__).read_text().splitlines()) < 400, module.__name__
