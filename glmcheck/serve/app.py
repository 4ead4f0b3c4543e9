"""The FastAPI app over a `Served` model: the OpenAI-compatible and SGLang endpoints the engines
expose, plus what a client records about the server it talked to.

    POST /v1/completions   OpenAI legacy completions (`glmcheck.serve.schemas`, `.openai`), streamed with
                           `stream: true` (`.streaming`)
    POST /v1/chat/completions  OpenAI chat completions under the model's chat template (`.chat`)
    POST /generate         SGLang's native generate (`glmcheck.serve.sglang`)
    GET  /v1/models        the one served model: id, root (checkpoint or preset), max_model_len
    GET  /get_model_info   SGLang's: model_path, tokenizer_path, is_generation
    GET  /version          {"version": glmcheck's version}
    GET  /health           200, empty body
    GET  /glmcheck/info    backend, model spec, config hash, device, versions, forwards run so far

Errors are OpenAI-style bodies `{"error": {"message", "type", "param", "code"}}`: 400 for a request
the server refuses (the message starts with the field), 404 for another model or path, 500 when the
backend produced non-finite logits or was never called (or anything else failed: the server logs its
traceback), 503 while shutting down. Requests are
answered one forward at a time (`Served.lock`), in a worker thread so the event loop stays free.
"""

from __future__ import annotations

import json
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from glmcheck import __version__
from glmcheck.serve.chat import chat_job, chat_response, chat_stream, parse_chat
from glmcheck.serve.engine import BackendFault, Generation, Served, ServerStopping
from glmcheck.serve.openai import completion_response, completion_stream
from glmcheck.serve.schemas import RequestError, error_body, parse_completion
from glmcheck.serve.sglang import generate_response, parse_generate


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status)


async def _json_body(request: Request) -> object:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise RequestError("body", f"not valid JSON ({err})") from None


def _run(served: Served, jobs: list[dict]) -> list[Generation]:
    return [served.generate(**job) for job in jobs]


def build_app(served: Served) -> FastAPI:
    """The app answering for `served` (module docstring); usable in process (TestClient)."""
    app = FastAPI(title="glmcheck serve", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.served = served
    created = int(time.time())

    @app.exception_handler(RequestError)
    async def _refused(request: Request, err: RequestError) -> JSONResponse:
        return _error(err.status, str(err), err.param or None)

    @app.exception_handler(BackendFault)
    async def _fault(request: Request, err: BackendFault) -> JSONResponse:
        return _error(500, str(err))

    @app.exception_handler(ServerStopping)
    async def _stopping(request: Request, err: ServerStopping) -> JSONResponse:
        return _error(503, str(err))

    @app.exception_handler(Exception)
    async def _internal(request: Request, err: Exception) -> JSONResponse:  # logged by the server too
        text = str(err).strip()
        return _error(500, f"{type(err).__name__}: {text.splitlines()[0] if text else 'no message'}")

    @app.exception_handler(HTTPException)
    async def _http(request: Request, err: HTTPException) -> JSONResponse:
        return _error(err.status_code, f"{request.method} {request.url.path}: {err.detail}")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        parsed = parse_completion(await _json_body(request), served)
        jobs = [{"ids": p.ids, "max_new": parsed.max_tokens, "prompt_from": 0 if parsed.scores_prompt else None,
                 "top": parsed.top, "stop": parsed.stop, "skip_special": parsed.skip_special} for p in parsed.prompts]
        if parsed.stream:
            return StreamingResponse(completion_stream(parsed, served, jobs), media_type="text/event-stream")
        results = await run_in_threadpool(_run, served, jobs)
        return JSONResponse(completion_response(parsed, results, served))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        parsed = parse_chat(await _json_body(request), served)
        chat_id = f"chatcmpl-{uuid.uuid4().hex}"
        if parsed.stream:
            return StreamingResponse(chat_stream(parsed, served, chat_id), media_type="text/event-stream")
        (result,) = await run_in_threadpool(_run, served, [chat_job(parsed)])
        return JSONResponse(chat_response(parsed, result, served, chat_id))

    @app.post("/generate")
    async def generate(request: Request) -> JSONResponse:
        parsed = parse_generate(await _json_body(request), served)
        jobs = [{"ids": p.ids, "max_new": parsed.max_new, "prompt_from": parsed.prompt_from(p), "top": parsed.top,
                 "stop": parsed.stop, "skip_special": parsed.skip_special} for p in parsed.prompts]
        results = await run_in_threadpool(_run, served, jobs)
        return JSONResponse(generate_response(parsed, results, served))

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": served.name, "object": "model", "created": created,
                                            "owned_by": "glmcheck", "root": served.root, "parent": None,
                                            "max_model_len": served.positions}]}

    @app.get("/get_model_info")
    async def model_info() -> dict:
        return {"model_path": served.root, "tokenizer_path": served.root, "is_generation": True}

    @app.get("/version")
    async def version() -> dict:
        return {"version": __version__}

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/glmcheck/info")
    async def info() -> dict:
        return {**served.info, "served_model_name": served.name, "backend": served.backend,
                "max_logprobs": served.max_logprobs, "max_model_len": served.positions, "forwards": served.forwards}

    return app
