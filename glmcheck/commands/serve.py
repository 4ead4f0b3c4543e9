"""`glmcheck serve`: an OpenAI-compatible completions server over the harness, one backend.

The model is built once; every request runs greedy forwards under `--backend` (`glmcheck.serve`).
Bad input (an unknown backend, a bad checkpoint, a port in use) is one line and exit 2, before the
model is built. Once it serves, one line on stdout says where; SIGTERM or SIGINT stops it cleanly:
requests in flight end between two forwards (503), one line on stderr names the signal, and the
process exits 0 at once (without the interpreter's teardown of torch and transformers, which takes
seconds and has nothing left to save). Interrupted while the model is still being built, it exits
130 (SIGINT) or 143 (SIGTERM), as the other commands.
"""

from __future__ import annotations

import argparse
import os
import sys

from glmcheck.commands.model_options import add_kv_cache_option
from glmcheck.evaluate.arguments import check_count, check_experts, check_layers, check_seed
from glmcheck.model.names import model_names
from glmcheck.model.trained import DEFAULT_MODEL

HELP = "an OpenAI-compatible completions server over the harness, one backend"


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help=HELP, description=(
        "Serve the model under one backend behind the API the engines expose: POST /v1/completions (OpenAI "
        "legacy completions, as vLLM: greedy, top-k logprobs, echo, prompt_logprobs, streaming), POST "
        "/v1/chat/completions (with a chat template), POST /generate (SGLang's native API), "
        "GET /v1/models, /version, /health and /glmcheck/info (backend, model, config hash, versions). No KV "
        "cache: each generated token re-runs the prefill. One request runs at a time."))
    p.add_argument("--model", default=DEFAULT_MODEL, choices=model_names(), metavar="MODEL",
                   help=f"trained model or dummy preset (default {DEFAULT_MODEL}; `glmcheck --help` lists them)")
    p.add_argument("--checkpoint", default=None, help="local Hugging Face checkpoint directory (bf16 or FP8)")
    p.add_argument("--layers", type=int, default=None, help="override the preset's number of layers")
    p.add_argument("--experts", type=int, default=None, help="override the preset's number of routed experts")
    p.add_argument("--seed", type=int, default=0, help="dummy weights seed (presets)")
    p.add_argument("--init", default="sharp", choices=["hf", "sharp"], help="dummy weight scale (default sharp)")
    p.add_argument("--backend", required=True,
                   help="the backend every forward runs under: a built-in name (`glmcheck backends`), an installed "
                        "entry point, or NAME=MODULE:FUNCTION / NAME=FILE.py:FUNCTION")
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree emulated (divides the heads)")
    add_kv_cache_option(p, "bf16 or fp8_e4m3: emulate an FP8 KV cache feeding the absorbed backends")
    p.add_argument("--deterministic", action="store_true", help="batch-invariant kernels (union off)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: a free one, printed)")
    p.add_argument("--served-model-name", default=None,
                   help="the name requests give as `model` (default: the trained model's, preset's or checkpoint "
                        "directory's name)")
    p.add_argument("--max-logprobs", type=int, default=20,
                   help="largest `logprobs` / `top_logprobs_num` a request may ask (default 20, as vLLM)")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="Jinja chat template for /v1/chat/completions (a file, or the template itself; default: the "
                        "checkpoint tokenizer's own), as vLLM's --chat-template")
    p.add_argument("--log-requests", action="store_true", help="uvicorn's access log (one line per request)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """The options' checks that need no model (`glmcheck.cli` runs it before any heavy import)."""
    check_seed(ns.seed)
    if not ns.checkpoint:
        check_layers(ns.layers)
        check_experts(ns.experts)
    check_count(ns.tp, "--tp")
    check_count(ns.max_logprobs, "--max-logprobs", minimum=1)
    if not 0 <= ns.port <= 65535:
        raise ValueError(f"--port must be an int in [0, 65535], got {ns.port}")
    if not ns.host.strip():
        raise ValueError("--host names no address")
    if not ns.backend.strip() or "," in ns.backend:
        raise ValueError(f"--backend must name one backend, got {ns.backend!r}")
    if ns.served_model_name is not None and not ns.served_model_name.strip():
        raise ValueError("--served-model-name must be a non-empty string")


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.model.load import ModelSpec
    from glmcheck.process.interrupts import Terminated
    from glmcheck.serve.app import build_app
    from glmcheck.serve.process import listen, run_server, url_of
    from glmcheck.serve.startup import ServeSettings, prepare

    precheck(ns)
    spec = ModelSpec(preset=ns.model, checkpoint=ns.checkpoint, layers=ns.layers, experts=ns.experts, seed=ns.seed,
                     init=ns.init)
    plan = prepare(ServeSettings(spec, ns.backend, ns.device, ns.tp,
                                 None if ns.kv_cache_dtype == "bf16" else ns.kv_cache_dtype, ns.deterministic,
                                 ns.served_model_name, ns.max_logprobs, ns.chat_template))
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    sock = listen(ns.host, ns.port)
    try:
        served = plan.load()
        url = url_of(ns.host, sock)

        def ready() -> None:
            print(f"glmcheck serve: {served.name} with {served.backend} on {url}", flush=True)

        stopped_by = run_server(build_app(served), sock, on_ready=ready, on_stop=served.stopping.set,
                                log_requests=ns.log_requests)
    except KeyboardInterrupt as stop:
        print("glmcheck serve: interrupted before serving", file=sys.stderr)
        return 143 if isinstance(stop, Terminated) else 130
    finally:
        sock.close()
    print(f"glmcheck serve: stopped ({stopped_by or 'shut down'})", file=sys.stderr, flush=True)
    if stopped_by:  # a signal ended the process's one job: skip the interpreter's teardown of torch (seconds)
        sys.stdout.flush()
        os._exit(0)
    return 0
