"""Sources of rows over HTTP: running inference servers asked for greedy tokens and top-k logprobs.

- `endpoint`: `Endpoint` and `--endpoint NAME=URL` parsing, `describe` (-> `ServerInfo`),
  `check_same_model`. Parsing imports no HTTP library.
- `completions`: `complete` / `complete_many` (-> `Completion`, `NextToken`), both protocols.
- `window`: `prompt_window` / `prompt_windows`: the next-token distributions at a prompt's last W
  positions (echo / logprob_start_len), both protocols.
- `transport`: `Http` (timeouts, retries with backoff), `EndpointError`, `run_bounded`.

The names below are importable from `glmcheck.sources` directly; each module is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Endpoint": "endpoint", "ServerInfo": "endpoint", "describe": "endpoint", "parse_endpoint": "endpoint",
    "parse_endpoints": "endpoint", "check_same_model": "endpoint",
    "Completion": "completions", "NextToken": "completions", "complete": "completions",
    "complete_many": "completions", "prompt_window": "window", "prompt_windows": "window",
    "EndpointError": "transport", "Http": "transport", "HttpOptions": "transport", "run_bounded": "transport",
}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'glmcheck.sources' has no attribute {name!r}")
    return getattr(importlib.import_module(f"glmcheck.sources.{_WHERE[name]}"), name)
