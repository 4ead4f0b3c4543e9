"""`sweep_endpoints`: the length sweep against running servers (`glmcheck sweep --endpoint ...`).

The prompt is built here, as token ids, by the tokenizer of `--model` / `--checkpoint` (the servers must
serve a model with that tokenizer; ids are sent as they are, so each length is exact): held-out text of
a checkpoint with a tokenizer, seeded ids otherwise. Each server is asked once for the distributions at every
position of the longest prompt (`glmcheck.sources.window` with the window the whole prompt: echo / input logprobs),
the reference twice; a server lists the top-k of each position, so the per-position distance is the mean
|dlogprob| over the reference's top-k (`glmcheck.checks.positions.listed_position_statistics`), binned by prompt
length and judged as in process (`glmcheck.checks.position_sweep`) against the reference's rerun and the
`--band-endpoint` servers.
"""

from __future__ import annotations

from collections.abc import Sequence

from glmcheck import __version__
from glmcheck.checks.position_sweep import run_position_sweep, sweep_outcome
from glmcheck.checks.positions import listed_position_statistics
from glmcheck.checks.sweep import Faulted, geometric_lengths, rerun_name
from glmcheck.data.model_prompts import model_prompt, prompt_source
from glmcheck.evaluate.bars import forward_bar
from glmcheck.evaluate.endpoint_checks import RecordDir, Servers
from glmcheck.evaluate.length_sweep import check_logprobs
from glmcheck.evaluate.options import CheckOptions
from glmcheck.evaluate.report import Report
from glmcheck.evaluate.setup import ResumeStore
from glmcheck.model.load import ModelSpec, config_of
from glmcheck.records.environment import code_identity
from glmcheck.sources.endpoint import Endpoint
from glmcheck.sources.transport import HttpOptions

SOURCE = "one request per server (the mean |dlogprob| over the reference's top-k at each position)"


def sweep_endpoints(endpoints: Sequence[str | Endpoint], band_endpoints: Sequence[str | Endpoint] = (), *,
                    tokenizer: CheckOptions | None = None, tokens: tuple[int, int] = (1024, 32768),
                    per_octave: int = 1, logprobs: int = 5,
                    concurrency: int = 4, http: HttpOptions | None = None, record_dir: RecordDir = None,
                    overwrite: bool = False, quiet: bool = False) -> Report:
    """Sweep `tokens` = (first, last) against the servers: the first of `endpoints` is the reference, the
    others are judged; `tokenizer` (its model / checkpoint and seed) builds the prompt. A finished record in
    `record_dir` is read back instead of asked again. The bar counts requests: one a server, two to the reference
    (its rerun)."""

    lengths = geometric_lengths(*tokens, per_octave)
    check_logprobs(logprobs)
    options = tokenizer or CheckOptions()
    options.check()
    spec = ModelSpec(preset=options.model, checkpoint=options.checkpoint, seed=options.seed)
    config = config_of(spec)
    ids = model_prompt(spec, config.vocab_size, lengths[-1], options.seed)[0].tolist()
    servers = Servers(endpoints, band_endpoints, http or HttpOptions(), concurrency)
    for name, info in servers.infos.items():
        if info.max_model_len is not None and info.max_model_len < lengths[-1]:
            raise ValueError(f"--tokens {lengths[0]}..{lengths[-1]}: server {name} serves at most {info.max_model_len} "
                             f"tokens")
    reference = servers.reference.name
    rerun = rerun_name(reference)
    fingerprint = {"command": "sweep", "servers": servers.identity(), "lengths": lengths, "logprobs": logprobs,
                   "tokenizer": spec.describe(), "code": code_identity()}
    resume = ResumeStore(record_dir, fingerprint, overwrite=overwrite, total=len(lengths), what="lengths")
    done = {int(key): payload for key, payload in resume.done.items()}
    directory = resume.start()
    jobs = [(reference, servers.reference), (rerun, servers.reference)] + \
        [(e.name, e) for e in servers.band + servers.candidates]
    band, judged = [e.name for e in servers.band], [e.name for e in servers.candidates]
    try:
        if len(done) < len(lengths):  # one request per server covers every length: a partial record is redone
            with forward_bar(len(jobs), "sweep requests (one a server)", quiet, unit="request") as bar:
                answers = servers.windows(jobs, ids, len(ids), logprobs, step=bar.update)
            ref = answers[reference]
            stats = {name: got if isinstance(got, Faulted) else listed_position_statistics(got, ref, logprobs)
                     for name, got in answers.items() if name != reference}
            result = run_position_sweep(stats, rerun, band, judged, lengths, source=SOURCE)
            for length in lengths:
                resume.save(str(length), [r for r in result.rows if r["tokens"] == length])
            done = {}
        else:
            result = sweep_outcome([r for length in lengths for r in done[length]], judged, lengths, SOURCE)
    finally:
        servers.close()
    facts = {**result.facts, "measure": "topk_dlogprob", "k": logprobs, "reference": reference, "band": band,
             "source": "endpoints", "prompt_source": prompt_source(spec), "resumed_items": len(done),
             "requests": len(jobs)}
    return Report("sweep", result.verdict, result.rows, facts,
                  {"endpoints": servers.record(), "glmcheck": __version__, "tokenizer": spec.describe()},
                  {"endpoints": [servers.reference.spec()] + [e.spec() for e in servers.candidates],
                   "band_endpoints": [e.spec() for e in servers.band], "concurrency": concurrency},
                  extra={"onsets": result.onsets}, record_dir=directory)


def logits_endpoints(endpoints: Sequence[str | Endpoint], band_endpoints: Sequence[str | Endpoint] = (), *,
                     tokenizer: CheckOptions | None = None, tokens: int = 4096, logprobs: int = 5,
                     concurrency: int = 4, http: HttpOptions | None = None, record_dir: RecordDir = None,
                     overwrite: bool = False, quiet: bool = False) -> Report:
    """The all-position logits check against servers (`glmcheck logits --endpoint ...`): every position of one
    prompt of `tokens` tokens judged at once, beside the reference's rerun and the band servers: the sweep's
    one-bin form (`sweep_endpoints` with tokens=(tokens, tokens)), so its record is a sweep record of one length."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"--tokens must be one positive int against servers, got {tokens!r}")
    return sweep_endpoints(endpoints, band_endpoints, tokenizer=tokenizer, tokens=(tokens, tokens), per_octave=1,
                           logprobs=logprobs, concurrency=concurrency, http=http, record_dir=record_dir,
                           overwrite=overwrite, quiet=quiet)
