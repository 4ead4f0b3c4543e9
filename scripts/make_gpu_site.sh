#!/usr/bin/env bash
# Builds .gpu-carry/site.tar.xz on this development machine: the Python packages that `glmcheck serve` and `lm_eval`
# (scripts/gpu_tasks.sh, scripts/time_lm_eval_serve.sh) need and the GPU machine's image lacks, as py312 x86-64
# wheels installed into one folder (`pip install --no-deps --target`), pruned and packed with xz. The GPU scripts
# unpack it into /tmp/site and put that on PYTHONPATH. A device call's tree is at most 64 MiB and the tracked tree
# is ~59 MiB, so only what glmcheck's task uses travels: lm-eval without its own task folders (most of its 9 MB
# wheel), no tests, no console scripts; nltk, rouge-score, defusedxml (lm-eval needs them for tasks glmcheck's does not
# run) stay out. Needs pip with network access; writes nothing half-done (the archive appears whole or not at all).
#   bash scripts/make_gpu_site.sh [OUT=.gpu-carry/site.tar.xz]
# Prints the archive's path, its file count and size. Carry .gpu-carry on each device call that needs it.
set -euo pipefail
die() { echo "make_gpu_site.sh: $*" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(realpath -m "${1:-$root/.gpu-carry/site.tar.xz}")

# One pin a line: NAME==VERSION, how it arrives (wheel: a py3 or cp312 manylinux wheel from the index; sdist: the
# index has only a source distribution, built here as a pure wheel), and who needs it. The GPU image already holds
# the rest of their dependencies (anyio, click, h11, numpy, pandas, pyarrow, huggingface-hub, fsspec, xxhash, ...).
PINS='
fastapi==0.165.0           wheel  # serve: the HTTP app
starlette==1.10.0          wheel  # serve: fastapi is built on it
uvicorn==0.55.0            wheel  # serve: the ASGI server
pydantic==2.13.4           wheel  # serve: fastapi request and response models
pydantic-core==2.46.4      wheel  # serve: pydantic compiled core (cp312 manylinux2014)
annotated-types==0.7.0     wheel  # serve: pydantic
typing-inspection==0.4.2   wheel  # serve: pydantic, fastapi
opentelemetry-api==1.45.3  wheel  # serve: fastapi
lm-eval==0.4.13            wheel  # lm-eval: the harness (its task folders pruned below)
tenacity==9.2.1            wheel  # lm-eval[api]: retries in the OpenAI-compatible client
evaluate==0.4.6            wheel  # lm-eval: metrics
pytablewriter==1.2.1       wheel  # lm-eval: the results table
dataproperty==1.1.1        wheel  # lm-eval: pytablewriter
tabledata==1.3.5           wheel  # lm-eval: pytablewriter
typepy==1.3.5              wheel  # lm-eval: pytablewriter, dataproperty
mbstrdecoder==1.1.5        wheel  # lm-eval: pytablewriter, typepy
chardet==6.0.0.post1       wheel  # lm-eval: mbstrdecoder
pathvalidate==3.3.1        wheel  # lm-eval: pytablewriter
tcolorpy==0.1.7            wheel  # lm-eval: pytablewriter
pytz==2026.6               wheel  # lm-eval: typepy[datetime] (pytablewriter asks for that extra)
more-itertools==11.2.1     wheel  # lm-eval: imported by lm_eval.utils
sqlitedict==2.1.0          sdist  # lm-eval: the request cache
word2number==1.1           sdist  # lm-eval: imported by its filters
datasets==5.2.0            wheel  # datasets: loads glmcheck_heldout_mc; lm-eval and evaluate need it too
dill==0.4.1                wheel  # datasets: hashing (also lm-eval, evaluate)
multiprocess==0.70.19      wheel  # datasets: parallel map (also evaluate)
'
pins() { sed -e 's/#.*//' -e '/^ *$/d' <<<"$PINS" | awk -v k="$1" '$2 == k {print $1}'; }
PLATFORMS=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

# .gpu-carry/ must never be committed (3 MB of other projects' code): ignore it in this clone if nothing does yet.
if ! git -C "$root" check-ignore -q .gpu-carry/site.tar.xz; then
  exclude=$(git -C "$root" rev-parse --path-format=absolute --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  printf '\n/.gpu-carry/\n' >> "$exclude"  # the newline first: the file may not end in one
  git -C "$root" check-ignore -q .gpu-carry/site.tar.xz || die "could not make git ignore .gpu-carry/ ($exclude)"
  echo "added /.gpu-carry/ to $exclude"
fi

work=$(mktemp -d); trap 'rm -rf "$work" "$out.part"' EXIT
wheels=$work/wheels site=$work/site
mkdir -p "$wheels" "$site"
mapfile -t binary < <(pins wheel); mapfile -t source < <(pins sdist)
echo "downloading ${#binary[@]} wheels for cp312 manylinux x86-64 ..."
python3 -m pip download -q --no-deps --only-binary=:all: "${PLATFORMS[@]}" -d "$wheels" "${binary[@]}" \
  || die "pip download failed: a wheel pin (pip names it above) has no cp312 manylinux x86-64 wheel at that version," \
         "or the index cannot be reached"
# The sdist-only pins: built as pure wheels with setuptools pinned to the version that built the first archive.
echo "setuptools==84.2.1" > "$work/build-constraints.txt"
for spec in "${source[@]}"; do
  PIP_CONSTRAINT=$work/build-constraints.txt python3 -m pip wheel -q --no-deps --no-binary=:all: -w "$wheels" "$spec" \
    || die "could not download or build $spec from its source distribution (see pip's message above)"
done
for spec in "${binary[@]}" "${source[@]}"; do  # exactly one wheel per pin, none extra
  name=${spec%%==*}; name=${name//-/_}; version=${spec#*==}
  compgen -G "$wheels/${name}-${version}-*.whl" > /dev/null || die "no wheel for $spec in $wheels: $(ls "$wheels")"
done
[ "$(ls "$wheels" | wc -l)" -eq $(( ${#binary[@]} + ${#source[@]} )) ] || die "extra wheels downloaded: $(ls "$wheels")"

echo "installing into $site for cp312 ..."
python3 -m pip install -q --no-deps --no-index --no-compile --no-cache-dir --only-binary=:all: "${PLATFORMS[@]}" \
  --target "$site" "$wheels"/*.whl || die "pip install --target failed (see above)"

# Prune: console scripts (bin/), the packages' own tests, lm-eval's task definitions (every folder under
# lm_eval/tasks/; the loader's files directly in it stay, glmcheck writes its own task YAML).
rm -rf "$site/bin" "$site/dill/tests" "$site/multiprocess/tests"
find "$site/lm_eval/tasks" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
# Each RECORD lists exactly the files present, so pip and importlib.metadata see a consistent install.
python3 - "$site" <<'EOF'
import csv, os, pathlib, sys
site = pathlib.Path(sys.argv[1])
present = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
listed = set()
for record in site.glob("*.dist-info/RECORD"):
    with record.open(newline="") as f:
        rows = [r for r in csv.reader(f) if r and os.path.normpath(r[0]) in present]
    with record.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    listed |= {os.path.normpath(r[0]) for r in rows}
unlisted = sorted(present - listed)
if unlisted:
    sys.exit(f"make_gpu_site.sh: files no RECORD lists: {unlisted[:10]}")
EOF

mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cJf "$out.part" -C "$site" . \
  || die "tar -cJf $out failed"
mv "$out.part" "$out"
echo "$out: $(tar -tJf "$out" | grep -vc '/$') files, $(du -h "$out" | cut -f1) ($(stat -c %s "$out") bytes)"
