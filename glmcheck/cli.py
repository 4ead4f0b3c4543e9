"""glmcheck: accuracy checks for the DSA sparse-MLA prefill kernel of GLM-5.x models.

Exit codes: 0 all checks pass, 1 a check failed, 2 bad usage or input (a one-line message; also
a NaN/Inf exact reference or noise band), 3 inconclusive (no row failed, but a noise band too wide
or too small to judge left some unjudged: `glmcheck.checks.band`), 4 a rank rehearsal (no verdict), 130
interrupted (SIGINT), 143 terminated (SIGTERM; `serve` stops gracefully and exits 0), 141 when the reader of its
output went away (`| head`); finished items of a resumable run are kept.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from glmcheck import __version__
from glmcheck.process.interrupts import Terminated, raise_sigint, raise_terminated
from glmcheck.process.wording import cli_wording, error_line

# Command name -> (module under glmcheck.commands, one-line help). `glmcheck --help` and --version
# read this table only; a command's module (and with it torch and the model code) is imported when
# that command runs or prints its own help (tests/test_cli.py keeps the lines equal to the modules').
COMMANDS: dict[str, tuple[str, str]] = {
    "kernel-check": ("kernel_check", "run the kernel on random inputs against the fp64 reference"),
    "selftest": ("selftest", "prove the accuracy suite catches planted kernel faults"),
    "layer0": ("layer0", "layer-0 attention output of every backend vs the reference"),
    "logits": ("logits", "next-token distributions at every position, per backend and prompt length"),
    "firsttoken": ("firsttoken", "greedy first token per prompt: argmax agreement and dlogprob"),
    "drift": ("drift", "per-layer hidden-state drift against the reference"),
    "sweep": ("sweep", "where along the prompt length does a backend leave the band?"),
    "report": ("report", "print the tables of a run record again"),
    "repro": ("repro", "a minimal repro of one FAIL row of a layer0 or drift record"),
    "capture-indices": ("capture_indices", "record every full indexer layer's top-k from a model run"),
    "union-stats": ("union_stats", "valid rows/token and union-of-2/4 ratios of index sets"),
    "plan": ("plan", "memory per GPU for a preset at a TP degree (printed before loading)"),
    "bench": ("bench", "kernel timings on the GPU, each point correctness-gated first"),
    "backends": ("backends", "list every backend found, where it came from and whether it runs here"),
    "serve": ("serve", "an OpenAI-compatible completions server over the harness, one backend"),
    "tasks": ("tasks", "task accuracy of servers, judged question by question (lm-evaluation-harness)"),
    "selfcheck": ("selfcheck", "the former name of kernel-check (deprecated)"),
}


def requested_command(argv: Sequence[str]) -> str | None:
    """The command named in `argv` (its first argument that is not an option), if it is one."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line on stderr (`prog: error: message`, no usage
    block) and exit 2, as every other input error of the CLI; its subcommands' parsers too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message.splitlines()[0] if message else 'bad usage'}\n")


# What an interrupted command keeps, by command (the rest keep nothing: they write only once finished). The
# resumable checks keep their finished items in the record directory (`glmcheck.evaluate.setup.ResumeStore`).
KEPT_WHEN_INTERRUPTED = {
    "logits": "the prompt lengths finished so far are kept in the record directory; rerun with the same --out to "
              "resume",
    "firsttoken": "the prompts finished so far are kept in the record directory; rerun with the same --out to resume",
    "serve": "nothing was served",
}


def interrupted_message(command: str) -> str:
    """The line an interrupted `command` ends with: what it keeps."""
    kept = KEPT_WHEN_INTERRUPTED.get(command, "nothing was written (this command writes its record only once it "
                                              "has finished)")
    return f"glmcheck {command}: interrupted; {kept}"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the full options of the command `argv` names (all of them when argv is None)
    and a name-and-help entry for every other command. A command's module registers its parser
    without importing torch, transformers or triton (its handler imports what it runs)."""
    import importlib

    wanted = requested_command(argv) if argv is not None else None
    import textwrap

    from glmcheck.model.names import models_epilog

    exit_codes = textwrap.fill(" ".join(__doc__.split("\n\n")[1].split()), 100)
    parser = OneLineParser(prog="glmcheck", description=__doc__.splitlines()[0],
                           epilog=f"{exit_codes}\n\n{models_epilog()}",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"glmcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_line) in COMMANDS.items():
        if argv is None or name == wanted:
            importlib.import_module(f"glmcheck.commands.{module}").add_parser(sub)
            _short_usage(sub.choices[name])
        else:
            sub.add_parser(name, help=help_line)
    return parser


def _short_usage(parser: argparse.ArgumentParser) -> None:
    """A command's usage line as `glmcheck NAME [options] POSITIONAL...` when argparse's own would take more than
    four lines (every option is listed below it anyway)."""
    if len(parser.format_usage().splitlines()) <= 4:
        return
    positional = [a.metavar or a.dest for a in parser._actions if not a.option_strings and a.dest != "help"]
    parser.usage = " ".join(["%(prog)s [options]", *map(str, positional)])


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool whose output pipe was closed
# Errors a command raises for bad usage or input (BackendError and CheckpointError are ValueErrors).
USAGE_ERRORS = (ValueError, TypeError, FileNotFoundError, NotADirectoryError)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the command's `precheck` (its options' checks that need no model: no torch,
    transformers or triton is imported yet, so bad usage is answered in well under a second), then
    import the kernels (on a CPU-only machine Triton must be imported in interpreter mode,
    TRITON_INTERPRET=1, before anything else imports it) and run the command's handler."""
    from glmcheck.process.phases import CLOCK
    from glmcheck.startup.bytecode import use_private_cache

    CLOCK.begin()
    use_private_cache()  # before torch is imported: a read-only install compiles its sources once, not every run
    argv = sys.argv[1:] if argv is None else list(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    ns = build_parser(argv).parse_args(argv)

    previous = _install_handlers() if _main_thread() else None
    try:
        with cli_wording():  # argument errors name the flags, not the library's Python arguments
            return _run(ns)
    finally:
        if previous is not None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _run(ns: argparse.Namespace) -> int:
    """The command `ns` names, from its precheck to its exit code (the exceptions that end it as exit codes)."""
    from glmcheck.process.phases import CLOCK, requested
    from glmcheck.startup.bytecode import hint as bytecode_hint

    try:
        if getattr(ns, "precheck", None) is not None:
            ns.precheck(ns)
        start_precompile(ns)  # a cold run's kernels compile in a second process while this one imports and builds
        import glmcheck.kernels  # noqa: F401

        if getattr(ns, "profile", False) or requested():
            CLOCK.enable()
        with _torchrun(ns):
            code = ns.handler(ns)
        if CLOCK.profiling:
            print(f"where the time went (--profile):\n{CLOCK.table()}", file=sys.stderr)
            if (advice := bytecode_hint()) is not None:
                print(advice, file=sys.stderr)
            CLOCK.disable()
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:  # the reader of stdout went away (`glmcheck report DIR | head -1`): stop as SIGPIPE does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is left to flush goes nowhere
        return EXIT_BROKEN_PIPE
    except USAGE_ERRORS as err:
        print(f"glmcheck {ns.command}: error: {error_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print(interrupted_message(ns.command), file=sys.stderr)
        return 143 if isinstance(stop, Terminated) else 130


PROMPTS = "prompts"  # a command's precompile_tokens for "the lengths of my prompt set" (firsttoken)


def precompile_spec(ns: argparse.Namespace):
    """The precompile child's spec (`glmcheck.startup.prediction.PrecompileSpec`) of the model check `ns` asks for:
    its command names its prompt lengths (`precompile_tokens(ns)`: a list, PROMPTS for the lengths of its prompt set,
    or None), its shared options say the rest. None when it names none (no model check, a check against servers, a
    --text prompt of unknown length) or its geometry cannot be read without the model code."""
    from glmcheck.checks.band import DEFAULT_BAND, SWEEP_BAND
    from glmcheck.startup.prediction import predict_spec

    lengths = getattr(ns, "precompile_tokens", None)
    tokens = lengths(ns) if lengths is not None else None
    if not tokens:
        return None
    band = ns.band if getattr(ns, "band", None) is not None else SWEEP_BAND if ns.command == "sweep" else DEFAULT_BAND
    return predict_spec(model=getattr(ns, "model", None), checkpoint=getattr(ns, "checkpoint", None), tp=ns.tp,
                        backends=ns.backends, band=band, exact=ns.exact, baseline=ns.baseline,
                        deterministic=ns.deterministic, kv_cache_dtype=ns.kv_cache_dtype, device=ns.device,
                        tokens=None if tokens == PROMPTS else tokens, prompts=getattr(ns, "prompts", None),
                        limit=getattr(ns, "limit", None), continue_tokens=getattr(ns, "continue_tokens", 0),
                        band_impl=getattr(ns, "band_impl", None), reference_impl=getattr(ns, "reference_impl", None))


def start_precompile(ns: argparse.Namespace) -> bool:
    """Start the precompile child for the check `ns` asks for where it can help (`glmcheck.startup.precompile`);
    whether one was started. Never raises for the child's sake: a check runs the same without it."""
    from glmcheck.startup import precompile

    if getattr(ns, "precompile_tokens", None) is None or not precompile.wanted(getattr(ns, "device", None)):
        return False
    spec = precompile_spec(ns)
    return spec is not None and precompile.start(spec)


def console_main() -> int:
    """The `glmcheck` command (console script and `python -m glmcheck`): `main()`, then the process ends without the
    interpreter's teardown once every exit handler has run (`glmcheck.process.fast_exit`)."""
    from glmcheck.process import fast_exit

    fast_exit.arm()
    return fast_exit.finish(main())


@contextlib.contextmanager
def _torchrun(ns: argparse.Namespace):
    """Under torchrun: join the process group (--tp must equal the world size), silence ranks > 0."""
    from glmcheck.model import distributed

    if not distributed.launched_by_torchrun():
        yield
        return
    if not hasattr(ns, "tp"):
        raise ValueError(f"{ns.command} does not run under torchrun (only the model commands with --tp do)")
    ctx = distributed.init_from_env(ns.tp, getattr(ns, "device", None))
    try:
        if ctx.is_main:
            yield
        else:
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
                yield
    finally:
        distributed.shutdown()


def _install_handlers() -> dict:
    """SIGTERM ends a run like Ctrl-C (exit 143); a SIGINT raises `SignalInterrupt`, so that a KeyboardInterrupt a
    kernel under test raises itself is told from Ctrl-C (`glmcheck.process.interrupts`). Returns the handlers
    replaced. A SIGINT handler of the caller's own (not Python's default) is left in place."""
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, raise_terminated)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, raise_sigint)
    return previous


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
