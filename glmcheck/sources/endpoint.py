"""Endpoints: which running inference server to ask, what it says it is, and whether two serve one model.

An endpoint is given as `NAME=URL` (the `--endpoint` option):

    NAME=[PROTOCOL+]http[s]://HOST[:PORT][/PATH][#MODEL]

PROTOCOL is `openai` (the default: `POST /v1/completions` of vLLM, SGLang and `glmcheck serve`) or
`sglang` (SGLang's native `POST /generate`). MODEL names the model to ask for when the server
serves several (else the server's only model is used). A trailing `/v1` of the URL is dropped
(the paths are added here). NAME is letters, digits, `_`, `-`, `.`; names must differ.

Parsing imports no HTTP library (a bad option fails fast); `describe` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx

    from glmcheck.sources.transport import Http, HttpOptions

PROTOCOLS = ("openai", "sglang")
OPTION = "--endpoint"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
EXAMPLE = "vllm=http://127.0.0.1:8000"


@dataclass(frozen=True)
class Endpoint:
    """One server: `url` is its base URL (scheme, host, port, path; no trailing '/' or '/v1');
    `model` None means: the one model the server serves."""

    name: str
    url: str
    protocol: str = "openai"
    model: str | None = None

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"endpoint {self.name}: protocol must be one of {', '.join(PROTOCOLS)}, "
                             f"got {self.protocol!r}")

    def __str__(self) -> str:
        return f"{self.name} ({self.url})"

    def spec(self) -> str:
        """The NAME=URL form that `parse_endpoint` reads back to this endpoint."""
        prefix = "" if self.protocol == "openai" else f"{self.protocol}+"
        return f"{self.name}={prefix}{self.url}" + (f"#{self.model}" if self.model else "")

    def connect(self, options: HttpOptions | None = None, *, max_connections: int = 4,
                transport: httpx.BaseTransport | None = None) -> Http:
        """An HTTP client of this server (`glmcheck.sources.transport.Http`); close it when done."""
        from glmcheck.sources.transport import Http, HttpOptions

        return Http(self.name, self.url, options or HttpOptions(), max_connections=max_connections,
                    transport=transport)


def parse_endpoint(text: str, option: str = OPTION) -> Endpoint:
    """The Endpoint that `text` (NAME=[PROTOCOL+]URL[#MODEL], see the module docstring) names;
    ValueError naming `option` and what was expected."""
    where = f"{option} {text!r}"
    name, sep, rest = text.partition("=")
    if not sep:
        raise ValueError(f"{where} must be NAME=URL (e.g. {EXAMPLE}); it has no '='")
    name = name.strip()
    if not name:
        raise ValueError(f"{where}: the name before '=' is empty; expected NAME=URL (e.g. {EXAMPLE})")
    if not _NAME.fullmatch(name):
        raise ValueError(f"{where}: name {name!r} must be letters, digits, '_', '-' or '.' (starting with a "
                         f"letter or digit)")
    rest, hash_sign, model = rest.strip().partition("#")
    if hash_sign and not model.strip():
        raise ValueError(f"{where}: the model after '#' is empty; expected NAME=URL#MODEL or no '#'")
    protocol = "openai"
    scheme_part = rest.split("://", 1)[0]
    if "+" in scheme_part:
        protocol, rest = rest.split("+", 1)
        if protocol not in PROTOCOLS:
            raise ValueError(f"{where}: protocol {protocol!r} must be one of {', '.join(PROTOCOLS)} "
                             f"(as in {name}=sglang+http://HOST:PORT)")
    try:
        parts = urlsplit(rest)
        port = parts.port
    except ValueError as err:
        raise ValueError(f"{where}: URL {rest!r} is not a URL ({err})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{where}: URL must start with http:// or https://, got {rest!r}")
    if not parts.hostname:
        raise ValueError(f"{where}: URL {rest!r} has no host; expected http://HOST[:PORT]")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{where}: URL must hold no user or password (records show URLs)")
    if parts.query or parts.fragment:
        raise ValueError(f"{where}: URL {rest!r} must have no query ('?'); the paths are added here")
    path = parts.path.rstrip("/").removesuffix("/v1")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    url = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "") + path
    return Endpoint(name, url, protocol, model.strip() or None)


def parse_endpoints(texts: Iterable[str], option: str = OPTION) -> list[Endpoint]:
    """Each of `texts` parsed (`parse_endpoint`); ValueError when two share a name."""
    endpoints: list[Endpoint] = []
    for text in texts:
        endpoint = parse_endpoint(text, option)
        twin = next((e for e in endpoints if e.name == endpoint.name), None)
        if twin is not None:
            raise ValueError(f"{option} name {endpoint.name!r} is given twice ({twin.spec()} and "
                             f"{endpoint.spec()}); each endpoint needs its own name")
        endpoints.append(endpoint)
    return endpoints


@dataclass
class ServerInfo:
    """What a server says it is. `endpoint` has its model resolved; `probes` maps each path asked
    to "ok" or what went wrong (a server lacks some of them: that is recorded, not an error)."""

    endpoint: Endpoint
    model: str
    models: list[str]
    owned_by: str | None = None  # /v1/models' owned_by: "vllm", "sglang", ...
    max_model_len: int | None = None  # tokens (prompt + generated), when the server says
    version: str | None = None
    glmcheck: dict | None = None  # GET /glmcheck/info (glmcheck serve: backend, config hash)
    probes: dict[str, str] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict for run records."""
        return {"name": self.endpoint.name, "url": self.endpoint.url, "protocol": self.endpoint.protocol,
                "model": self.model, "models": list(self.models), "owned_by": self.owned_by,
                "max_model_len": self.max_model_len, "version": self.version, "glmcheck": self.glmcheck,
                "probes": dict(self.probes)}


VERSION_PATHS = ("/version", "/server_info", "/get_server_info")  # vLLM and glmcheck serve; SGLang (new, old)
MODEL_HINT = "name it with NAME=URL#MODEL"


def describe(endpoint: Endpoint, http: Http | None = None, *, options: HttpOptions | None = None,
             transport: httpx.BaseTransport | None = None) -> ServerInfo:
    """Ask the server its model (`GET /v1/models`; SGLang: `GET /get_model_info` when that fails),
    version (the first of VERSION_PATHS that has one) and `GET /glmcheck/info`. EndpointError when
    it is unreachable, or its model cannot be told, or it does not serve `endpoint.model`."""
    if http is None:
        with endpoint.connect(options, transport=transport) as own:
            return describe(endpoint, own)
    probes: dict[str, str] = {}
    models: list[dict] | None = None
    outcome, body = _probe(http, "/v1/models", probes)
    if outcome == "ok":
        data = body.get("data") if isinstance(body, dict) else None
        if not (isinstance(data, list) and all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data)):
            raise http.error("GET /v1/models answered without a list of models (expected "
                             "{'data': [{'id': MODEL, ...}, ...]})")
        models = data
    elif endpoint.protocol == "sglang":
        outcome, body = _probe(http, "/get_model_info", probes)
        if outcome == "ok" and isinstance(body, dict) and isinstance(body.get("model_path"), str):
            models = [{"id": body["model_path"]}]
    ids = [m["id"] for m in models] if models is not None else []
    if models is None and endpoint.model is None:
        raise http.error(f"cannot tell which model it serves (GET /v1/models: {probes['/v1/models']}); "
                         f"{MODEL_HINT}")
    if endpoint.model is not None and models is not None and endpoint.model not in ids:
        raise http.error(f"serves {_listed(ids)}, not the model {endpoint.model!r} asked for")
    if endpoint.model is None and len(ids) != 1:
        raise http.error(f"serves {_listed(ids)}; {MODEL_HINT}" if ids else "serves no model (GET /v1/models "
                         "answered an empty list)")
    model = endpoint.model or ids[0]
    entry = next((m for m in models or [] if m["id"] == model), {})
    length = entry.get("max_model_len")
    info = ServerInfo(replace(endpoint, model=model), model, ids, _text(entry.get("owned_by")),
                      length if isinstance(length, int) and not isinstance(length, bool) else None,
                      probes=probes)
    for path in VERSION_PATHS:
        outcome, body = _probe(http, path, probes)
        if outcome == "ok" and isinstance(body, dict) and _text(body.get("version")):
            info.version = _text(body["version"])
            break
    outcome, body = _probe(http, "/glmcheck/info", probes)
    info.glmcheck = body if outcome == "ok" and isinstance(body, dict) else None
    if outcome == "ok" and info.glmcheck is None:
        probes["/glmcheck/info"] = "answered JSON that is not an object"
    return info


def _probe(http: Http, path: str, probes: dict[str, str]) -> tuple[str, Any]:
    """`http.try_get(path)`, recorded in `probes` (a server that does not answer raises EndpointError)."""
    outcome, body = http.try_get(path)
    probes[path] = outcome
    return outcome, body


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
    return f"{len(ids)} model{'s' if len(ids) != 1 else ''} ({shown})"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def check_same_model(infos: Sequence[ServerInfo]) -> None:
    """EndpointError naming the first two endpoints whose model ids differ (a comparison of two
    models says nothing about a kernel)."""
    from glmcheck.sources.transport import EndpointError

    for info in infos[1:]:
        first = infos[0]
        if info.model != first.model:
            raise EndpointError(None, None, f"{OPTION} {first.endpoint} serves model {first.model!r} but "
                                f"{info.endpoint} serves {info.model!r}; compare servers of one model")
