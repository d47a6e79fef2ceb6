#!/usr/bin/env bash
# Regenerate sample_logs/: real CPU runs recorded by `aah-viz train` at the small preset.
#   scripts/make_sample_logs.sh            # all 14 runs, two at a time (about 15 minutes on 2 cores)
#   JOBS=1 STEPS=280 scripts/make_sample_logs.sh
# The five paper regimes with seeds 0 and 1, and one seed of four controls. Each run has
# warm-up (20 steps) + 260 steps at control interval 5: 52 routing updates after warm-up.
# No checkpoints are kept. Runs are written to a staging folder and replace sample_logs/ only
# when every run finished, so a failed regeneration never destroys the committed logs.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
STEPS=${STEPS:-280}
JOBS=${JOBS:-2}
BATCH=${BATCH:-1}
OUT=${OUT:-sample_logs}
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
        --keep-checkpoints 0 --threads 1 --detail full --no-progress \
        --out "$STAGE/${regime}_seed${seed}" >"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        || { echo "failed: $regime seed $seed (log follows)" >&2; tail -20 "$STAGE/${regime}_seed${seed}.log" >&2; return 1; }
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
rm -rf "$OUT.new" && mkdir -p "$OUT.new"
for run in "${runs[@]}"; do mv "$STAGE/${run%%:*}_seed${run##*:}" "$OUT.new/"; done
[ -f "$OUT/README.md" ] && cp "$OUT/README.md" "$OUT.new/"
rm -rf "$OUT" && mv "$OUT.new" "$OUT"
du -sh "$OUT"
