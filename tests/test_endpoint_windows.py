"""glmcheck.sources: prompt windows of both protocols against httpx.MockTransport, then a real uvicorn server in a
thread and a real `glmcheck serve` process (the fake server: tests/support/fake_completions.py)."""

from __future__ import annotations

import json
import re
import time

import pytest

from glmcheck.sources import completions, transport, window
from glmcheck.sources import endpoint as endpoints
from glmcheck.sources.completions import complete, complete_many
from glmcheck.sources.endpoint import Endpoint, describe, parse_endpoint
from glmcheck.sources.transport import EndpointError, HttpOptions
from glmcheck.sources.window import prompt_window, prompt_windows
from tests.support.fake_completions import (
    MODEL,
    OPENAI,
    SGLANG,
    URL,
    LiveServer,
    answer_for,
    completing,
    mock,
    raises_one_line,
    sglang_window_answer,
    window_expected,
)
from tests.support.servers import MODEL as SERVE_MODEL
from tests.support.servers import Servers

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
            for key, _ in complete_many(ep, {f"p{i}": "z" for i in range(8)}, 1, 1, concurrency=1):
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
