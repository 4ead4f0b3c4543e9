"""`glmcheck serve`: the OpenAI completions and SGLang /generate schemas against the in-process harness
(the same forwards, so the same numbers to 1e-6), every refusal naming its field, and one real server
process started, queried and stopped with SIGTERM. Model: ref-cpu (vocab 2048, 3 layers), reference
backend (one triton_sparse_mla test, in the interpreter), short prompts."""

from __future__ import annotations

import dataclasses
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from glmcheck import cli
from glmcheck.backends import registry
from glmcheck.checks.firsttoken import greedy_continuation
from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.model.load import ModelSpec
from glmcheck.records.environment import config_hash
from glmcheck.serve import ServeSettings, build_app, prepare

MODEL = "ref-cpu"
PROMPT = "The quick brown"


@pytest.fixture(scope="module")
def served():
    return prepare(ServeSettings(ModelSpec(MODEL), "reference", "cpu")).load()


@pytest.fixture(scope="module")
def client(served):
    with TestClient(build_app(served)) as test_client:
        yield test_client


def harness_logprobs(served, ids: list[int], backend: str = "reference") -> torch.Tensor:
    """The harness's fp64 log-softmax at every position of `ids` [len, vocab]."""
    logits = forward_under(served.model, torch.tensor([ids]), backend, SwapOptions(), last_logits=len(ids))
    return torch.log_softmax(logits.captured.logits[0].double(), dim=-1)  # captures keep the model's dtype


def complete(client, **body) -> dict:
    response = client.post("/v1/completions", json={"model": MODEL, **body})
    assert response.status_code == 200, response.text
    return response.json()


def ids_of(tokens: list[str]) -> list[int]:
    return [int(t.removeprefix("token_id:")) for t in tokens]


def test_greedy_completion_equals_the_harness(client, served):
    body = complete(client, prompt=PROMPT, max_tokens=3, logprobs=2, temperature=0, return_tokens_as_token_ids=True)
    ids = served.codec.encode(PROMPT)
    expected = greedy_continuation(served.model, torch.tensor([ids]), "reference", SwapOptions(), 3)
    (choice,) = body["choices"]
    logprobs = choice["logprobs"]
    assert ids_of(logprobs["tokens"]) == expected
    for step, token in enumerate(expected):
        harness = harness_logprobs(served, ids + expected[:step])[-1]
        assert logprobs["token_logprobs"][step] == pytest.approx(float(harness[token]), abs=1e-6)
        top = sorted(logprobs["top_logprobs"][step].items(), key=lambda kv: -kv[1])
        best = torch.topk(harness, 2)
        assert [int(t.removeprefix("token_id:")) for t, _ in top] == best.indices.tolist()
        assert [lp for _, lp in top] == pytest.approx(best.values.tolist(), abs=1e-6)
    assert choice["text"] == served.codec.decode(expected) and choice["finish_reason"] == "length"
    assert body["object"] == "text_completion" and body["model"] == MODEL and body["id"].startswith("cmpl-")
    assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 3, "total_tokens": len(ids) + 3}
    named = complete(client, prompt=PROMPT, max_tokens=3, logprobs=0)["choices"][0]["logprobs"]
    assert named["tokens"] == [served.codec.token_text(t) for t in expected]
    assert [list(top) for top in named["top_logprobs"]] == [[t] for t in named["tokens"]], "k=0: the token only"
    assert named["text_offset"] == [sum(len(t) for t in named["tokens"][:i]) for i in range(3)]


def test_echo_scores_the_prompt_as_the_harness(client, served):
    """lm-evaluation-harness's loglikelihood request: echo, max_tokens 0 or 1, logprobs 1."""
    ids = served.codec.encode("Hello there, world")
    harness = harness_logprobs(served, ids)
    for max_tokens in (0, 1):
        choice = complete(client, prompt=ids, max_tokens=max_tokens, logprobs=1, echo=True, temperature=0,
                          seed=1234)["choices"][0]
        logprobs = choice["logprobs"]
        assert len(logprobs["tokens"]) == len(ids) + max_tokens
        assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
        for position in range(1, len(ids)):
            expected = float(harness[position - 1, ids[position]])
            assert logprobs["token_logprobs"][position] == pytest.approx(expected, abs=1e-6), position
            top = logprobs["top_logprobs"][position]
            assert top[served.codec.token_text(ids[position])] == pytest.approx(expected, abs=1e-6)
            assert max(top.values()) == pytest.approx(float(harness[position - 1].max()), abs=1e-6)
        assert logprobs["tokens"][:len(ids)] == [served.codec.token_text(t) for t in ids]
        assert choice["text"].startswith(served.codec.decode(ids))
    greedy = int(harness[-1].argmax())
    assert logprobs["tokens"][-1] == served.codec.token_text(greedy)
    assert logprobs["token_logprobs"][-1] == pytest.approx(float(harness[-1, greedy]), abs=1e-6)


def test_a_batch_answers_each_prompt_in_order(client, served):
    texts = ["One two", "Three four five"]
    single = [complete(client, prompt=t, max_tokens=2, logprobs=1)["choices"][0] for t in texts]
    for prompt in (texts, [served.codec.encode(t) for t in texts]):
        body = complete(client, prompt=prompt, max_tokens=2, logprobs=1)
        assert [c["index"] for c in body["choices"]] == [0, 1]
        for choice, alone in zip(body["choices"], single):
            assert choice["text"] == alone["text"] and choice["logprobs"] == alone["logprobs"]
        assert body["usage"]["prompt_tokens"] == sum(len(served.codec.encode(t)) for t in texts)


def test_a_triton_kernel_behind_the_api_equals_the_harness(served):
    kernel = dataclasses.replace(served, backend="triton_sparse_mla", lock=threading.Lock())
    ids = served.codec.encode("Hi")
    with TestClient(build_app(kernel)) as triton_client:
        choice = complete(triton_client, prompt=ids, max_tokens=1, logprobs=1)["choices"][0]
    harness = harness_logprobs(served, ids, "triton_sparse_mla")[-1]
    assert choice["logprobs"]["token_logprobs"][0] == pytest.approx(float(harness.max()), abs=1e-6)
    assert choice["logprobs"]["tokens"][0] == served.codec.token_text(int(harness.argmax()))


def test_stop_strings_and_stop_tokens_end_a_continuation(client, served):
    full = complete(client, prompt=PROMPT, max_tokens=5, return_tokens_as_token_ids=True, logprobs=0)["choices"][0]
    tokens = ids_of(full["logprobs"]["tokens"])
    stop = served.codec.decode(tokens[2:4])
    cut = complete(client, prompt=PROMPT, max_tokens=5, stop=[stop])["choices"][0]
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    assert cut["text"] == full["text"][:full["text"].find(stop)]
    kept = complete(client, prompt=PROMPT, max_tokens=5, stop=stop, include_stop_str_in_output=True)["choices"][0]
    assert kept["text"] == full["text"][:full["text"].find(stop) + len(stop)]
    by_id = complete(client, prompt=PROMPT, max_tokens=5, stop_token_ids=[tokens[1]], logprobs=0)["choices"][0]
    assert by_id["finish_reason"] == "stop" and by_id["stop_reason"] == tokens[1]
    assert len(by_id["logprobs"]["tokens"]) == tokens.index(tokens[1]) + 1


BAD = [
    ({"model": "other"}, 404, "model"),
    ({"temperature": 0.7}, 400, "temperature"),
    ({"top_p": 0.9}, 400, "top_p"),
    ({"n": 2}, 400, "n"),
    ({"stream": "yes"}, 400, "stream"),
    ({"stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"stream": True, "prompt_logprobs": 1}, 400, "prompt_logprobs"),
    ({"prompt_logprobs": 21}, 400, "prompt_logprobs"),
    ({"logprobs": 21}, 400, "logprobs"),
    ({"logprobs": -1}, 400, "logprobs"),
    ({"logprobs": True}, 400, "logprobs"),
    ({"echo": "yes"}, 400, "echo"),
    ({"max_tokens": 0}, 400, "max_tokens"),
    ({"max_tokens": "3"}, 400, "max_tokens"),
    ({"max_tokens": 4096}, 400, "max_tokens"),
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": [[]]}, 400, "prompt[0]"),
    ({"prompt": [5, 2048]}, 400, "prompt[1]"),
    ({"prompt": [[5], [1.5]]}, 400, "prompt[1][0]"),
    ({"prompt": [5] * 4097}, 400, "prompt"),
    ({"prompt": 7}, 400, "prompt"),
    ({"stop": [1]}, 400, "stop"),
    ({"presence_penalty": 0.5}, 400, "presence_penalty"),
    ({"best_of": 3}, 400, "best_of"),
    ({"frobnicate": 1}, 400, "frobnicate"),
]


@pytest.mark.parametrize("change, status, param", BAD, ids=[f"{p}-{s}" for _, s, p in BAD])
def test_completion_refusals_name_their_field(client, change, status, param):
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 1, **change}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(f"{param}: ") and error["code"] == status
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_bodies_that_are_not_a_json_object_are_refused(client):
    for content in (b"{not json", b"[1, 2]"):
        response = client.post("/v1/completions", content=content, headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["error"]["param"] == "body"
    assert client.post("/v1/completions", json={"model": MODEL}).json()["error"]["message"] == "prompt: required"


def test_generate_speaks_sglangs_native_format(client, served):
    ids = served.codec.encode(PROMPT)
    body = client.post("/generate", json={"text": PROMPT, "sampling_params": {"max_new_tokens": 2, "temperature": 0},
                                          "return_logprob": True, "top_logprobs_num": 2,
                                          "return_text_in_logprobs": True}).json()
    openai = complete(client, prompt=PROMPT, max_tokens=2, logprobs=2, return_tokens_as_token_ids=True)
    tokens = ids_of(openai["choices"][0]["logprobs"]["tokens"])
    meta = body["meta_info"]
    assert body["text"] == openai["choices"][0]["text"] and body["output_ids"] == tokens
    assert meta["finish_reason"] == {"type": "length", "length": 2}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (len(ids), 2)
    assert meta["input_token_logprobs"] == [[None, ids[-1], served.codec.token_text(ids[-1])]]
    assert meta["output_token_logprobs"] == [[lp, t, served.codec.token_text(t)] for lp, t in
                                             zip(openai["choices"][0]["logprobs"]["token_logprobs"], tokens)]
    assert [len(top) for top in meta["output_top_logprobs"]] == [2, 2] and meta["input_top_logprobs"] == [None]
    assert [top[0][:2] for top in meta["output_top_logprobs"]] == [entry[:2] for entry in meta["output_token_logprobs"]]

    harness = harness_logprobs(served, ids)
    batch = client.post("/generate", json={"input_ids": [ids, ids[:3]], "sampling_params": {"max_new_tokens": 0},
                                           "return_logprob": True, "logprob_start_len": 0}).json()
    assert isinstance(batch, list) and len(batch) == 2
    scored = batch[0]["meta_info"]["input_token_logprobs"]
    assert scored[0] == [None, ids[0], None] and [t for _, t, _ in scored] == ids
    assert [lp for lp, _, _ in scored[1:]] == pytest.approx([float(harness[p - 1, ids[p]]) for p in range(1, len(ids))],
                                                            abs=1e-6)
    assert batch[1]["text"] == "" and batch[1]["output_ids"] == []
    assert len(batch[1]["meta_info"]["input_token_logprobs"]) == 3


@pytest.mark.parametrize("body, param", [
    ({"text": "Hi", "input_ids": [5]}, "text"),
    ({}, "text"),
    ({"text": "Hi", "sampling_params": {"temperature": 1.0}}, "sampling_params.temperature"),
    ({"text": "Hi", "sampling_params": {"max_new_tokens": -1}}, "sampling_params.max_new_tokens"),
    ({"text": "Hi", "sampling_params": {"frobnicate": 1}}, "sampling_params.frobnicate"),
    ({"text": "Hi", "sampling_params": [{}]}, "sampling_params"),
    ({"input_ids": [5, 6], "return_logprob": True, "logprob_start_len": 2}, "logprob_start_len"),
    ({"text": "Hi", "top_logprobs_num": 21}, "top_logprobs_num"),
    ({"input_ids": "Hi"}, "input_ids"),
    ({"text": "Hi", "stream": True}, "stream"),
    ({"text": "Hi", "rid": ["a", "b"]}, "rid"),
])
def test_generate_refusals_name_their_field(client, body, param):
    response = client.post("/generate", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(f"{param}: ")


def test_models_version_health_and_info(client, served):
    (model,) = client.get("/v1/models").json()["data"]
    assert model["id"] == MODEL and model["owned_by"] == "glmcheck" and model["max_model_len"] == 4096
    assert model["root"].endswith("data/resources/trained_models/ref-cpu")
    from glmcheck import __version__
    assert client.get("/version").json() == {"version": __version__}
    assert client.get("/health").status_code == 200
    info = client.get("/glmcheck/info").json()
    assert info["backend"] == "reference" and info["backend_source"] == "built in"
    assert info["config_hash"] == config_hash(served.model.config) and info["model"]["trained"] == MODEL
    assert info["device"] == "cpu" and info["environment"]["torch_version"] == torch.__version__
    assert {"triton_version", "transformers_version"} <= set(info["environment"])
    assert client.get("/nowhere").json()["error"]["code"] == 404


def _nan_kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    return torch.full((*q.shape[:2], d_v), float("nan"), dtype=q.dtype, device=q.device)


def test_a_kernel_fault_is_a_500_and_shutdown_a_503(served):
    registry.register_backend("serve_test_nan", _nan_kernel, "NaN everywhere")
    try:
        broken = dataclasses.replace(served, backend="serve_test_nan", lock=threading.Lock())
        with TestClient(build_app(broken)) as broken_client:
            response = broken_client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
        assert response.status_code == 500
        assert "backend 'serve_test_nan' produced non-finite logits" in response.json()["error"]["message"]
    finally:
        registry.unregister_backend("serve_test_nan")
    stopping = dataclasses.replace(served, lock=threading.Lock(), stopping=threading.Event())
    stopping.stopping.set()
    with TestClient(build_app(stopping)) as stopping_client:
        assert stopping_client.post("/generate", json={"text": "Hi"}).status_code == 503


def test_bad_cli_input_is_one_line_and_exit_2(capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        for argv, words in ((["--backend", "nosuch"], "unknown backend 'nosuch'"),
                            (["--backend", "reference", "--port", str(port)], f"--port {port}: cannot listen"),
                            (["--backend", "reference", "--max-logprobs", "-1"], "--max-logprobs must be"),
                            (["--backend", "reference", "--checkpoint", "/nonexistent"], "/nonexistent")):
            assert cli.main(["serve", *argv]) == 2
            err = capsys.readouterr().err
            assert err.startswith("glmcheck serve: error: ") and words in err and err.count("\n") == 1, err
    finally:
        taken.close()


def _ready_line(process: subprocess.Popen, timeout: float) -> str:
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        process.kill()
        pytest.fail(f"no ready line in {timeout} s; stderr: {process.communicate()[1][-2000:]}")


def test_a_server_process_answers_and_stops_on_sigterm(client):
    process = subprocess.Popen([sys.executable, "-m", "glmcheck", "serve", "--model", MODEL, "--backend", "reference",
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _ready_line(process, 120)
        assert line.startswith(f"glmcheck serve: {MODEL} with reference on http://127.0.0.1:"), line
        url = line.split(" on ")[1].strip()
        assert not url.endswith(":0")
        with httpx.Client(base_url=url, timeout=60) as http:
            assert http.get("/health").status_code == 200
            assert http.get("/v1/models").json()["data"][0]["id"] == MODEL
            body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2, "logprobs": 2}
            remote = http.post("/v1/completions", json=body).json()["choices"][0]
        local = complete(client, **body)["choices"][0]
        assert remote["text"] == local["text"] and remote["logprobs"]["tokens"] == local["logprobs"]["tokens"]
        assert remote["logprobs"]["token_logprobs"] == pytest.approx(local["logprobs"]["token_logprobs"], abs=1e-6)
        process.send_signal(signal.SIGTERM)
        start = time.monotonic()
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert time.monotonic() - start < 10
        assert "Traceback" not in err and err.strip().splitlines()[-1] == "glmcheck serve: stopped (SIGTERM)", err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()



def test_the_docs_say_what_serve_exits_with_on_sigterm():
    """The server's SIGTERM exit (0, above) is what the documented exit codes say of it, not the checks' 143."""
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "checks.md").read_text().split())
    assert "`glmcheck serve` once serving stops gracefully on SIGTERM or SIGINT and exits 0" in text
