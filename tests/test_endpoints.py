"""glmcheck.sources: endpoint parsing, both completion protocols, every EndpointError, retries, describe and
bounded concurrency, against httpx.MockTransport (the fake server: tests/support/fake_completions.py). Prompt windows
and real servers: tests/test_endpoint_windows.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time

import httpx
import pytest

from glmcheck.sources.completions import Completion, complete, complete_many
from glmcheck.sources.endpoint import Endpoint, ServerInfo, check_same_model, describe, parse_endpoint, parse_endpoints
from glmcheck.sources.transport import EndpointError, HttpOptions, run_bounded
from tests.support.fake_completions import (
    MODEL,
    OPENAI,
    SGLANG,
    URL,
    answer_for,
    completing,
    fake_top,
    mock,
    openai_answer,
    raises_one_line,
    sglang_answer,
)

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


def test_unreachable_retried_with_backoff_then_gives_up(pauses):
    calls = []
    def refused(request: httpx.Request) -> httpx.ConnectError:
        return httpx.ConnectError("[Errno 111] Connection refused", request=request)

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

    def answer(request: httpx.Request):  # the first call's answer, then the second's (mock appends to calls first)
        return answers[len(calls) - 1](request)

    got = complete(OPENAI, "x", 1, 1, transport=mock({"/v1/completions": answer}, calls))
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
