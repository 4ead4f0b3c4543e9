"""`glmcheck serve`: an OpenAI-compatible completions server (and SGLang's native /generate) over
glmcheck's harness, greedy with top-k logprobs, so any built-in or plug-in backend sits behind the
API the engines expose.

    plan = prepare(ServeSettings(ModelSpec("ref-cpu"), "triton_sparse_mla"))   # checked, not built
    served = plan.load()                                                      # the model, built once
    app = build_app(served)                                                   # FastAPI; TestClient works

One concern per module: `startup` (settings -> Served), `engine` (the forwards), `codec` (text and
token ids), `schemas` (request validation, OpenAI request), `openai` / `sglang` (each API's shapes),
`app` (routes and errors), `process` (socket, uvicorn, signals).
"""

from glmcheck.serve.app import build_app
from glmcheck.serve.engine import Served
from glmcheck.serve.startup import ServePlan, ServeSettings, prepare

__all__ = ["ServePlan", "ServeSettings", "Served", "build_app", "prepare"]
