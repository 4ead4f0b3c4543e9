"""The options of checks that can read rows from running servers (`--endpoint NAME=URL`): the servers,
the band servers and how to talk to them; and the in-process options they exclude. Light module: no
torch, no HTTP library (parsing the endpoints imports neither)."""

from __future__ import annotations

import argparse

from glmcheck.evaluate.arguments import check_count, check_number

# In-process options and their defaults: given with --endpoint they would be ignored, so they are refused.
IN_PROCESS_DEFAULTS = {"checkpoint": None, "layers": None, "experts": None, "init": "sharp", "device": None, "tp": 1,
                       "backends": None, "exact": "fp32", "baseline": None, "band": None,
                       "kv_cache_dtype": None, "deterministic": False, "max_rel_l2": None, "save_tensors": False,
                       "dense_threshold": None, "weights": "auto", "rehearse_rank": None}
ENDPOINT_ONLY = ("band_endpoint", "concurrency", "timeout", "retries")


def add_endpoint_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("running servers (instead of an in-process model)")
    group.add_argument("--endpoint", action="append", default=None, metavar="NAME=URL",
                       help="a server, repeatable, the reference first (http(s)://host:port, sglang+http://...)")
    group.add_argument("--band-endpoint", action="append", default=None, metavar="NAME=URL",
                       help="a band sample: the reference again, repeatable (3+ let the band judge)")
    group.add_argument("--concurrency", type=int, default=None, metavar="N",
                       help="requests in flight at once (default 4)")
    group.add_argument("--timeout", type=float, default=None, metavar="S",
                       help="seconds to wait for an answer (default 120)")
    group.add_argument("--retries", type=int, default=None, metavar="N",
                       help="retries of a refused connection or a 429/50x (default 3)")


def add_logprobs_option(parser: argparse.ArgumentParser) -> None:
    """--logprobs K of logits and sweep: the reference's top-K the distance is taken over (a server caps K; the
    library checks the cap). firsttoken's own --logprobs (servers only, at least 2) is not this one."""
    parser.add_argument("--logprobs", type=int, default=5, metavar="K",
                        help="with --endpoint: the top-K over which mean |dlogprob| is taken (default 5, at most 20)")


def check_logprobs_option(ns: argparse.Namespace) -> None:
    """--logprobs (`add_logprobs_option`) a positive int, before any heavy import."""
    check_count(ns.logprobs, "--logprobs")


def check_endpoint_usage(ns: argparse.Namespace) -> None:
    """With --endpoint the in-process options are refused; without it the server options are."""
    if ns.endpoint:
        given = [f"--{name.replace('_', '-')}" for name, default in IN_PROCESS_DEFAULTS.items()
                 if hasattr(ns, name) and getattr(ns, name) != default]
        if given:
            raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to an in-process model; "
                             f"with --endpoint the servers run the model (drop {'it' if len(given) == 1 else 'them'}, "
                             f"or drop --endpoint)")
        check_count(ns.concurrency, "--concurrency")
        check_number(ns.timeout, "--timeout", positive=True)
        check_count(ns.retries, "--retries", minimum=0)
        return
    given = [f"--{name.replace('_', '-')}" for name in ENDPOINT_ONLY if getattr(ns, name, None) is not None]
    if given:
        raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to running servers: add "
                         f"--endpoint NAME=URL (the reference first)")


def http_options(ns: argparse.Namespace):
    """The HttpOptions of --timeout / --retries (defaults where not given)."""
    from glmcheck.sources.transport import HttpOptions

    defaults = HttpOptions()
    return HttpOptions(timeout=ns.timeout if ns.timeout is not None else defaults.timeout,
                       retries=ns.retries if ns.retries is not None else defaults.retries)
