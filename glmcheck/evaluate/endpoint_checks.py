"""Checks against running servers (`--endpoint NAME=URL`): the rows come from OpenAI-compatible
`/v1/completions` or SGLang's `/generate` (`glmcheck.sources`) instead of an in-process forward, and
sit in the same tables, records, band and gate.

The first `--endpoint` is the reference, the others the candidates. The band: the reference queried
again (its rerun; a stack that reruns bit for bit gives a sample of zero width) and each
`--band-endpoint` (further instances of the reference, or other shipped backends named as legitimate,
e.g. the engine's default kernel). A candidate is judged against those samples only, never against zero:
with fewer than 3 band endpoints (`MIN_BAND`) the band cannot judge and the rows are INCONCLUSIVE.
What a server gives is the top-k logprobs of each generated position, not full logits: a logprob the
candidate does not list counts at its k-th (a lower bound on |dlogprob|, said in the record). A candidate whose
server answers that its logits were NaN/Inf (an HTTP 5xx saying so, as `glmcheck serve` does) is a FAIL row, as
the same kernel is in process; the reference or a band server doing so is bad input (exit 2), and every other
server failure is an EndpointError (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from glmcheck import __version__
from glmcheck.checks.band import FAIL, BadReference
from glmcheck.checks.continuation import Step, compare
from glmcheck.checks.distributions import TopKDistribution
from glmcheck.checks.firsttoken import DEFAULT_TIE_GAP, Choice, PromptOutcome, faulted, summarize
from glmcheck.checks.sweep import Faulted
from glmcheck.evaluate.arguments import check_count, check_number, check_tie_gap
from glmcheck.evaluate.bars import forward_bar
from glmcheck.evaluate.report import Report
from glmcheck.evaluate.setup import ResumeStore
from glmcheck.process.wording import flag
from glmcheck.records.environment import code_identity
from glmcheck.sources.completions import Completion, complete
from glmcheck.sources.endpoint import Endpoint, ServerInfo, check_same_model, describe, parse_endpoints
from glmcheck.sources.transport import EndpointError, HttpOptions, reports_non_finite, run_bounded
from glmcheck.sources.window import prompt_window

RecordDir = Path | Callable[[], Path] | None


class TokenTable:
    """Token texts (what servers key logprobs by) interned as ints for `PromptOutcome`; `token_text`
    gives the text back (the firsttoken tables' tokenizer protocol)."""

    def __init__(self):
        self._ids: dict[str, int] = {}
        self._texts: list[str] = []

    def id(self, text: str) -> int:
        if text not in self._ids:
            self._ids[text] = len(self._texts)
            self._texts.append(text)
        return self._ids[text]

    def token_text(self, token: int) -> str:
        return self._texts[token]


@dataclass(frozen=True)
class NonFiniteAnswer:
    """A server's answer that its logits were NaN/Inf (`reports_non_finite`): for a candidate a FAIL row, for the
    reference or a band server bad input."""

    message: str


class Servers:
    """The reference, candidate and band endpoints of a run, described (model, version) and connected."""

    def __init__(self, endpoints: Sequence[str | Endpoint], band_endpoints: Sequence[str | Endpoint],
                 options: HttpOptions, concurrency: int):
        check_count(concurrency, "--concurrency")
        named = [e for e in endpoints if isinstance(e, Endpoint)]
        given = parse_endpoints([e for e in endpoints if isinstance(e, str)]) + named
        band = parse_endpoints([e for e in band_endpoints if isinstance(e, str)], "--band-endpoint") + \
            [e for e in band_endpoints if isinstance(e, Endpoint)]
        if len(given) < 2:
            raise ValueError(f"--endpoint: name the reference server first and at least one candidate (got "
                             f"{len(given)})")
        names = [e.name for e in given + band]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"--endpoint / --band-endpoint: the name {twice[0]!r} is given twice; each server needs "
                             f"its own name")
        self.options, self.concurrency = options, concurrency
        self.infos: dict[str, ServerInfo] = {e.name: describe(e, options=options) for e in given + band}
        check_same_model(list(self.infos.values()))
        self.reference = self.infos[given[0].name].endpoint
        self.candidates = [self.infos[e.name].endpoint for e in given[1:]]
        self.band = [self.infos[e.name].endpoint for e in band]
        self._http = {}

    def record(self) -> dict:
        return {"reference": self.reference.name, "candidates": [e.name for e in self.candidates],
                "band": [e.name for e in self.band], "servers": {n: i.to_record() for n, i in self.infos.items()}}

    def identity(self) -> dict:
        """What decides the results, for a resume fingerprint: each endpoint's name, protocol and what it said
        it serves (of `glmcheck serve`'s info the stable part, not its counters or clock). Not its URL: a run
        resumes against a server restarted on another port."""
        stable = ("backend", "backend_identity", "model", "config_hash", "device", "tp", "options")
        return {name: {"protocol": info.endpoint.protocol, "model": info.model, "version": info.version,
                       "glmcheck": {k: (info.glmcheck or {}).get(k) for k in stable} if info.glmcheck else None}
                for name, info in self.infos.items()}

    def ask(self, jobs: list[tuple[str, Endpoint]], prompt, max_tokens: int, logprobs: int,
            step: Callable[[], object] | None = None) -> dict[str, Completion | NonFiniteAnswer]:
        """Each (row name, endpoint) asked for `prompt`, up to `concurrency` at once (`judged`); `step` is called
        once a request as each answer arrives."""
        def work(endpoint: Endpoint) -> Completion:
            return complete(endpoint, prompt, max_tokens, logprobs, self.http(endpoint))
        return self.judged(self._gather(work, jobs, step))

    def windows(self, jobs: list[tuple[str, Endpoint]], token_ids: list[int], window: int, logprobs: int,
                step: Callable[[], object] | None = None) -> dict[str, list[TopKDistribution] | Faulted]:
        """Each (row name, endpoint) asked for the distributions at the last `window` positions of `token_ids`; a
        candidate that answered non-finite logits is `Faulted` there (`judged`); `step` as in `ask`."""
        def work(endpoint: Endpoint) -> list[TopKDistribution]:
            entries = prompt_window(endpoint, token_ids, window, logprobs, self.http(endpoint))
            return [TopKDistribution.of(entry) for entry in entries]
        answers = self.judged(self._gather(work, jobs, step))
        return {name: Faulted(a.message) if isinstance(a, NonFiniteAnswer) else a for name, a in answers.items()}

    def _gather(self, work: Callable[[Endpoint], object], jobs: list[tuple[str, Endpoint]],
                step: Callable[[], object] | None) -> dict:
        """{row name: `work`'s answer or NonFiniteAnswer} over `jobs`, `step` called in this thread per answer."""
        answers = {}
        for name, answer in run_bounded(_answer_or_non_finite(work), jobs, self.concurrency):
            answers[name] = answer
            if step is not None:
                step()
        return answers

    def judged(self, answers: dict) -> dict:
        """`answers` as they are once no server but a candidate answered non-finite logits; BadReference (bad
        input, exit 2) naming the reference or band server that did."""
        candidates = {e.name for e in self.candidates}
        for name, answer in answers.items():
            if isinstance(answer, NonFiniteAnswer) and name not in candidates:
                role = "a band server" if name in {e.name for e in self.band} else "the reference"
                raise BadReference(f"{answer.message} ({role}: bad input, not a kernel fault)")
        return answers

    def http(self, endpoint: Endpoint):
        if endpoint.name not in self._http:
            self._http[endpoint.name] = endpoint.connect(self.options, max_connections=self.concurrency)
        return self._http[endpoint.name]

    def close(self) -> None:
        for http in self._http.values():
            http.close()


def _answer_or_non_finite(work: Callable[[Endpoint], object]) -> Callable[[Endpoint], object]:
    """`work`, answering NonFiniteAnswer where the server said its logits were NaN/Inf (other failures raise)."""
    def answer(endpoint: Endpoint) -> object:
        try:
            return work(endpoint)
        except EndpointError as err:
            if not reports_non_finite(err):
                raise
            return NonFiniteAnswer(f"server answered non-finite logits: {err}")
    return answer


def _outcome(prompt_id: str, row: str, mine: Completion | NonFiniteAnswer, ref: Completion, table: TokenTable,
             continuation: bool) -> PromptOutcome:
    """One row's outcome on one prompt against the reference's first answer (see module docstring)."""
    theirs = ref.next_token(0)
    if isinstance(mine, NonFiniteAnswer):
        return faulted(prompt_id, row, Choice(table.id(theirs.token), theirs.logprob, -1, theirs.gap), mine.message)
    own = mine.next_token(0)
    listed, kth = own.logprob_of(theirs.token)
    dlogprob = abs((listed if listed is not None else kth) - theirs.logprob)
    agree = own.token == theirs.token or listed == own.logprob  # a tie at the top agrees (`judge_prompt`)
    outcome = PromptOutcome(prompt_id, row, table.id(own.token), own.logprob, table.id(theirs.token), theirs.logprob,
                            theirs.gap, agree, dlogprob)
    if continuation:  # as vLLM's check_logprobs_close, by token text (`glmcheck.checks.continuation`)
        found = compare(_steps(mine), _steps(ref))
        outcome.divergence, outcome.divergence_mutual, outcome.divergence_gap = found.position, found.mutual, found.gap
    return outcome


def _steps(answer: Completion) -> list[Step]:
    return [Step(token, tuple(top)) for token, top in zip(answer.tokens, answer.top)]


def _saved_outcome(outcome: PromptOutcome, table: TokenTable) -> dict:
    """An outcome as a resume item: its tokens by text (a table's numbers hold in the process that made them)."""
    return {**asdict(outcome), "token": _text(table, outcome.token), "ref_token": _text(table, outcome.ref_token)}


def _read_outcome(item: dict, table: TokenTable) -> PromptOutcome:
    """The outcome `_saved_outcome` wrote, its token texts interned in this process's `table`."""
    return PromptOutcome(**{**item, "token": _number(table, item["token"]), "ref_token": _number(table,
                                                                                              item["ref_token"])})


def _text(table: TokenTable, token: int) -> str | None:
    return None if token < 0 else table.token_text(token)


def _number(table: TokenTable, text: str | None) -> int:
    return -1 if text is None else table.id(text)


def firsttoken_endpoints(endpoints: Sequence[str | Endpoint], band_endpoints: Sequence[str | Endpoint] = (), *,
                         prompts: str | None = None, limit: int | None = None, continue_tokens: int = 0,
                         logprobs: int = 5, tie_gap: float | None = None, max_dlogprob: float | None = None,
                         gate_ratio: float = 2.0, concurrency: int = 4, http: HttpOptions | None = None,
                         record_dir: RecordDir = None, overwrite: bool = False, quiet: bool = False) -> Report:
    """`glmcheck firsttoken --endpoint ...`: the greedy first token of each prompt (sent as text) from every
    server, judged as in process (`glmcheck.checks.firsttoken.summarize`). Resumable per prompt in
    `record_dir`; bad input or any server failure raises ValueError (EndpointError) with one line. The bar
    counts requests, one a prompt and server (the reference twice)."""
    from glmcheck.checks.band import check_gate_ratio
    from glmcheck.data.prompts import load_prompts

    tie_gap = DEFAULT_TIE_GAP if tie_gap is None else tie_gap
    http = http or HttpOptions()
    check_count(limit, flag("limit"))
    check_count(continue_tokens, flag("continue_tokens"), minimum=0)
    check_count(logprobs, flag("logprobs"), minimum=2)
    check_tie_gap(tie_gap, flag("tie_gap"))
    check_number(max_dlogprob, flag("max_dlogprob"), positive=True)
    check_gate_ratio(gate_ratio, flag("gate_ratio"))
    prompt_set = prompts or "natural50"
    chosen = load_prompts(prompt_set, limit)
    servers = Servers(endpoints, band_endpoints, http, concurrency)
    rerun = f"{servers.reference.name} (rerun)"
    fingerprint = {"command": "firsttoken", "servers": servers.identity(), "prompts": {p.id: p.prompt for p in chosen},
                   "continue_tokens": continue_tokens, "logprobs": logprobs, "tie_gap": tie_gap,
                   "max_dlogprob": max_dlogprob, "gate_ratio": gate_ratio, "code": code_identity()}
    resume = ResumeStore(record_dir, fingerprint, overwrite=overwrite, total=len(chosen), what="prompts")
    table, outcomes = TokenTable(), []
    done = {key: [_read_outcome(o, table) for o in payload] for key, payload in resume.done.items()}
    directory = resume.start()
    jobs = [(servers.reference.name, servers.reference), (rerun, servers.reference)] + \
        [(e.name, e) for e in servers.band + servers.candidates]
    try:
        with forward_bar(len(chosen) * len(jobs), "firsttoken requests (prompt x server)", quiet,
                         initial=len(done) * len(jobs), unit="request") as bar:
            for prompt in chosen:
                if prompt.id in done:
                    outcomes += done[prompt.id]
                    continue
                answers = servers.ask(jobs, prompt.prompt, max(1, continue_tokens), logprobs, step=bar.update)
                ref = answers[servers.reference.name]
                batch = [_outcome(prompt.id, name, answers[name], ref, table, continue_tokens > 0)
                         for name, _ in jobs[1:]]
                resume.save(prompt.id, [_saved_outcome(o, table) for o in batch])
                outcomes += batch
    finally:
        servers.close()
    names = [rerun] + [e.name for e in servers.band] + [e.name for e in servers.candidates]
    result = summarize(outcomes, names, rerun, table, gate_ratio, max_dlogprob, tie_gap, continue_tokens,
                       [e.name for e in servers.band])
    for row in result.summary_rows:  # the in-process wording names --band; here the band is --band-endpoint
        row["note"] = row["note"].replace("(--band)", "(--band-endpoint)")
    zero_rerun = all(o.dlogprob == 0 and o.agree for o in outcomes if o.backend == rerun)
    facts = {**result.facts, "prompt_set": prompt_set, "prompts": len(chosen), "resumed_items": len(done),
             "source": "endpoints", "logprobs": logprobs,
             "rerun": "the reference server reruns bit for bit: its rerun is a band sample of zero width, so the "
                      "candidates are judged against the --band-endpoint servers" if zero_rerun else
                      "the reference server does not rerun bit for bit"}
    verdict = result.verdict if any(r["verdict"] != "-" for r in result.summary_rows) else FAIL
    return Report("firsttoken", verdict, [asdict(o) for o in result.outcomes], facts,
                  {"endpoints": servers.record(), "glmcheck": __version__},
                  {"endpoints": [servers.reference.spec()] + [e.spec() for e in servers.candidates],
                   "band_endpoints": [e.spec() for e in servers.band], "concurrency": concurrency,
                   "timeout": http.timeout, "retries": http.retries},
                  extra={"summary_rows": result.summary_rows, "disagreements": result.disagreements},
                  record_dir=directory)
