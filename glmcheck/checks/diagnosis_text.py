"""The diagnosis and the repros as the tables print them (no torch: `glmcheck report` renders records with it).

A record of layer0 or drift holds, in its facts, `diagnoses` (one entry a FAIL row: "row", "backend", "layer" for
drift, "findings" in order, each with its "text") and `repros` (one entry a repro written: "script", "tokens",
"heads", "of", "reproduces"). `parts(facts)` gives the lines under the table: at most MAX_LINES findings a row,
each naming its row, then one line a repro.
"""

from __future__ import annotations

MAX_LINES = 3  # findings printed a row (the record keeps them all)


def finding_lines(diagnoses: list[dict]) -> list[str]:
    """At most MAX_LINES findings of each diagnosed row, each line naming its row."""
    out = []
    for entry in diagnoses:
        name = entry.get("backend", "?") + (f", layer {entry['layer']}" if entry.get("layer") is not None else "")
        findings = entry.get("findings") or []
        if not findings:
            out.append(f"{name}: no structure found beside the band (heads, positions, slots, output dims, scale)")
        out += [f"{name}: {f.get('text', '')}" for f in findings[:MAX_LINES]]
    return out


def repro_lines(repros: list[dict]) -> list[str]:
    """One line a repro: where, how small against the failing call, how to run it."""
    out = []
    for entry in repros:
        name = entry.get("backend", "?")
        if not entry.get("written"):
            out.append(f"{name}: no repro written ({entry.get('why', '')})")
            continue
        tokens, heads = entry.get("of", [None, None])
        runs = "" if entry.get("reproduces") else " (its script did not reproduce the FAIL here)"
        out.append(f"{name}: python {entry['script']}  ({entry['tokens']} of {tokens} tokens, {entry['heads']} of "
                   f"{heads} heads; exits 1 while the kernel fails){runs}")
    return out


def parts(facts: dict) -> list[str]:
    """The text blocks under a layer0 or drift table: the diagnosis, then the repros (none when there are neither)."""
    blocks = []
    diagnoses, repros = facts.get("diagnoses") or [], facts.get("repros") or []
    if diagnoses:
        blocks.append("diagnosis of the FAIL rows (fp64, each breakdown beside the band's own):\n"
                      + "\n".join(finding_lines(diagnoses)))
    if repros:
        blocks.append("minimal repros:\n" + "\n".join(repro_lines(repros)))
    return blocks


def position_lines(entries: list[tuple[str, str]]) -> list[str]:
    """The block under a logits or sweep table: one line a FAIL row, (its name, its `diagnosis`) (none: no block)."""
    if not entries:
        return []
    return ["where the FAIL rows leave the band (positions whose KL is beyond the band's):\n"
            + "\n".join(f"{name}: {text}" for name, text in entries)]


def check_command(command: str, options, backend: str, tokens: int, seed: int) -> str:
    """The command line of `command` (layer0, drift) on `options`' model (a CheckOptions) for one `backend` (as
    --backends names it) over a prompt of `tokens` at `seed`."""
    import shlex

    words = ["glmcheck", command] + (["--checkpoint", options.checkpoint] if options.checkpoint else
                                     ["--model", options.model])
    for flag, value in (("--layers", options.layers), ("--experts", options.experts),
                        ("--tp", options.tp if options.tp != 1 else None), ("--kv-cache-dtype", options.kv_cache_dtype),
                        ("--init", options.init if options.init != "sharp" else None),
                        ("--band-impl", options.band_impl if options.band_impl != "auto" else None),
                        ("--reference-impl", options.reference_impl if options.reference_impl != "torch" else None)):
        if value is not None:
            words += [flag, str(value)]
    words += ["--backends", backend, "--tokens", str(tokens), "--seed", str(seed)]
    return " ".join(shlex.quote(w) for w in words)


def command_for(probe_verdict: str | None) -> str:
    """The check that shows a logits or sweep FAIL's layer: layer0 when layer 0 fails too, else drift."""
    return "layer0" if probe_verdict == "FAIL" else "drift"
