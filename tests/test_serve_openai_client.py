"""`glmcheck serve` as vLLM answers, asked through the official `openai` client (issue 73): `text_offset` indexes
`text` under echo (the BOS put before a text prompt has no text), completions stream as server-sent events,
`/v1/chat/completions` answers under a chat template and refuses a model without one (400 naming the template),
vLLM's `prompt_logprobs`. Model: ref-cpu, reference backend; the client talks to the app in process (its
httpx client is the app's TestClient)."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from fastapi.testclient import TestClient

from glmcheck.model.load import ModelSpec
from glmcheck.serve import ServeSettings, build_app, prepare

openai = pytest.importorskip("openai")  # the test extra brings it

MODEL = "ref-cpu"
TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def served():
    return prepare(ServeSettings(ModelSpec(MODEL), "reference", "cpu")).load()


@pytest.fixture(scope="module")
def client(served):
    with TestClient(build_app(served)) as http:
        yield openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0)


@pytest.fixture(scope="module")
def chat_client(served):
    templated = dataclasses.replace(served, chat_template=TEMPLATE, lock=threading.Lock())
    with TestClient(build_app(templated)) as http:
        yield openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0)


def _assert_offsets_index_text(text: str, tokens: list[str], offsets: list[int], special: set[str]) -> None:
    assert offsets == sorted(offsets) and offsets[0] == 0
    for token, at in zip(tokens, offsets):
        if token in special:
            continue
        if "\ufffd" not in token:
            assert text[at:at + len(token)] == token, (token, at, text[at:at + 20])


def test_echo_offsets_index_the_text_the_bos_has_none(client, served):
    prompt = "Hello world. It was été"  # a character split over two byte tokens too
    out = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, echo=True, logprobs=1, temperature=0)
    choice = out.choices[0]
    lp = choice.logprobs
    assert choice.text.startswith(prompt) and lp.tokens[0] == "<bos>"
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == 0  # vLLM's own count would put token 1 at len("<bos>")
    _assert_offsets_index_text(choice.text, lp.tokens, lp.text_offset, {"<bos>"})
    generated = len(served.codec.encode(prompt))
    assert lp.text_offset[generated] == len(prompt)  # the first generated token starts where the prompt ends
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, logprobs=1).choices[0]
    assert plain.logprobs.text_offset[0] == 0
    _assert_offsets_index_text(plain.text, plain.logprobs.tokens, plain.logprobs.text_offset, set())


def test_a_streamed_completion_is_the_plain_one_in_chunks(client):
    body = dict(model=MODEL, prompt="The quick brown", max_tokens=4, logprobs=2, temperature=0)
    whole = client.completions.create(**body).choices[0]
    chunks = list(client.completions.create(**body, stream=True, stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len(texts) >= 2 and "".join(texts) == whole.text
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    offsets = [o for c in chunks if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
    assert tokens == whole.logprobs.tokens and offsets == whole.logprobs.text_offset
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    echoed = list(client.completions.create(**body, echo=True, stream=True))
    assert echoed[0].choices[0].text.startswith("The quick brown")
    assert "".join(c.choices[0].text for c in echoed) == client.completions.create(**body, echo=True).choices[0].text


def test_a_streamed_stop_string_is_never_sent(client):
    full = client.completions.create(model=MODEL, prompt="The quick brown", max_tokens=6).choices[0].text
    stop = full[3:5]
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="The quick brown", max_tokens=6, stop=[stop], stream=True))
    assert streamed == full[:full.find(stop)]


def test_chat_answers_under_the_template_and_streams(chat_client, served):
    messages = [{"role": "user", "content": "Say something."}]
    reply = chat_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, logprobs=True,
                                                top_logprobs=2)
    prompt = "<|user|>Say something.\n<|assistant|>"
    plain = served.generate(served.codec.encode(prompt, add_bos=False), 4, top=2)
    assert reply.choices[0].message.role == "assistant" and reply.choices[0].message.content == plain.text
    assert [c.token for c in reply.choices[0].logprobs.content] == [served.codec.token_text(p.token)
                                                                    for p in plain.output]
    assert len(reply.choices[0].logprobs.content[0].top_logprobs) == 2
    assert reply.usage.prompt_tokens == len(served.codec.encode(prompt, add_bos=False))
    chunks = list(chat_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == plain.text
    assert chunks[-1].choices[0].finish_reason == plain.finish


def test_chat_without_a_template_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    assert "no chat template" in str(caught.value) and "--chat-template" in str(caught.value)


def test_prompt_logprobs_as_vllm_answers(client, served):
    raw = client.completions.with_raw_response.create(model=MODEL, prompt="Hello there", max_tokens=1,
                                                      extra_body={"prompt_logprobs": 2}).http_response.json()
    scored = raw["choices"][0]["prompt_logprobs"]
    ids = served.codec.encode("Hello there")
    assert scored[0] is None and len(scored) == len(ids)
    for position, entry in zip(ids[1:], scored[1:]):
        own = entry[str(position)]
        assert set(own) == {"logprob", "rank", "decoded_token"} and own["rank"] >= 1
        ranked = sorted(entry.values(), key=lambda e: e["rank"])
        assert ranked[0]["rank"] == 1 and ranked[0]["logprob"] >= own["logprob"]
