"""Run-environment facts recorded with every result, and a stable hash of a model config.

`environment_metadata()` returns only JSON-serialisable values (str, bool, int, list, None);
facts that cannot be determined (no git, no triton, no GPU) are None rather than errors.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import socket
from pathlib import Path
from typing import Any

import torch

import glmcheck
from glmcheck.process.git import git_output

_HASH_CHARS = 16


def git_sha() -> str | None:
    """Short sha of HEAD of the checkout glmcheck lives in; None if not a git checkout."""
    sha = git_output("rev-parse", "--short", "HEAD")
    return sha or None


def git_dirty() -> bool | None:
    """True if the checkout has uncommitted changes, False if clean, None if unknown."""
    status = git_output("status", "--porcelain")
    return None if status is None else bool(status)


def _optional_version(module_name: str) -> str | None:
    """`module.__version__`, or None when the module cannot be imported."""
    try:
        module = __import__(module_name)
    except Exception:  # noqa: BLE001 - a broken optional install must not fail metadata
        return None
    return getattr(module, "__version__", None)


def _gpu_facts() -> dict[str, Any]:
    """cuda_available plus gpu_name / gpu_capability of the current device (None on CPU)."""
    available = torch.cuda.is_available()
    if not available:
        return {"cuda_available": False, "gpu_name": None, "gpu_capability": None}
    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    return {
        "cuda_available": True,
        "gpu_name": torch.cuda.get_device_name(device),
        "gpu_capability": [major, minor],
    }


def environment_metadata() -> dict[str, Any]:
    """JSON-serialisable facts about this run: versions, git state, GPU, host and UTC time."""
    return {
        "glmcheck_version": glmcheck.__version__,
        "git_sha": git_sha(),
        "git_dirty": git_dirty(),
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "triton_version": _optional_version("triton"),
        "transformers_version": _optional_version("transformers"),
        **_gpu_facts(),
        "hostname": socket.gethostname(),
        "timestamp_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def config_hash(config: Any) -> str:
    """First 16 hex chars of sha256 over the config's full JSON with sorted keys.

    `config` must be a transformers `PretrainedConfig` (anything with
    `to_json_string(use_diff=False)`); equal geometries give equal hashes.
    """
    to_json = getattr(config, "to_json_string", None)
    if not callable(to_json):
        raise TypeError(
            f"config: expected a transformers PretrainedConfig with to_json_string(), "
            f"got {type(config).__name__}"
        )
    canonical = json.dumps(json.loads(to_json(use_diff=False)), sort_keys=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:_HASH_CHARS]


def source_digest() -> str:
    """First 16 hex chars of sha256 over every glmcheck source file (path and bytes): the code that
    decides a result, dirty working trees included."""
    root = Path(glmcheck.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:_HASH_CHARS]



def code_identity() -> dict[str, Any]:
    """glmcheck version, git sha and the source digest: the code identity of a resumable run."""
    return {"glmcheck_version": glmcheck.__version__, "git_sha": git_sha(), "source_digest": source_digest()}
