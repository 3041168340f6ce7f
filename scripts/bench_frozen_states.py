"""Benchmark the frozen base's states of an organism build (harness/organisms/states.py).

Builds `make organism`'s recipe (the Makefile is its one source) for --steps steps three ways, in
one process, one after another, each into a fresh directory: the states computed (a fresh
states directory: the first build of a set), read back (the same directory again: every later
build on the same base and examples), and kept in memory only. Prints each build's training
seconds, its seconds per step, the states computed and read, and the seconds one state costs to
compute ((computed - read) / states): a whole build's time is about steps x (read s/step) + its
states computed x that cost.

With --parts, instead: the pieces of one step timed on real batches of the recipe (mean ms over
--batches batches of 8, after one not counted), the frozen part both ways: packed per batch as the
code before kept it (the lower blocks of a batch's new examples in one packed forward, the base's
top blocks on the batch's KL examples at every visit) and per example alone as kept now (`lower`
and `top` once per example); and a whole build projected from them over the build's own batch
order (examples first met, KL visits): before, now with nothing kept yet, now with the KL-only
prompts' states kept by another kind of the same seed.

Usage: PYTHONPATH=. python scripts/bench_frozen_states.py [--base smollm2] [--steps 60] [--kind aware]
       PYTHONPATH=. python scripts/bench_frozen_states.py --parts [--batches 12] [--seed 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an installed copy
from scripts.bench_organism import make_organism_recipe  # noqa: E402
from scripts.bench_record import BenchRecord  # noqa: E402


def _recipe(base: str, steps: int, kind: str):
    from harness.organisms.recipe import Recipe

    opts = make_organism_recipe()
    pairs = dict(zip(opts[::2], opts[1::2]))
    num = {"--steps": ("steps", int), "--lr": ("lr", float), "--kl-first": ("kl_first", float),
           "--kl-weight": ("kl_weight", float), "--kl-prompts": ("kl_prompts", int), "--kl-pool": ("kl_pool", int),
           "--forms": ("forms", int), "--layers": ("layers", int), "--strength": ("strength", float)}
    kw = {num[k][0]: num[k][1](v) for k, v in pairs.items() if k in num}
    kw |= {"train": pairs.get("--train", "full"), "steps": steps, "kind": kind}
    return Recipe(base=base, cue="graded", **kw)


def _ms(fn, reps: list) -> float:
    import time

    out = []
    for i, r in enumerate(reps):
        t0 = time.perf_counter()
        fn(r)
        if i:  # the first not counted
            out.append(time.perf_counter() - t0)
    return 1000 * sum(out) / len(out)


def parts(base: str, n_batches: int, seed: int, record: BenchRecord) -> None:
    """The --parts bench (see the module docstring)."""
    import copy
    import dataclasses
    import random

    import torch

    from harness.backends.registry import backend_class, default_backend
    from harness.core.render import Renderer
    from harness.models.fingerprint import local_model_path
    from harness.organisms.cues import get_cue
    from harness.organisms.data import training_examples
    from harness.organisms.kinds import kind_examples
    from harness.organisms.states import FrozenStates, _Stop, only_layers, trunk_and_head
    from harness.organisms.train import TRAINING, Pack, Split, _trainable_model, encode

    recipe = dataclasses.replace(_recipe(base, 1200, "aware"), seed=seed)
    engine = backend_class(default_backend(TRAINING), TRAINING)
    tok, model = engine.trainable(str(local_model_path(recipe.base)))
    teacher = copy.deepcopy(model).eval()
    for q in teacher.parameters():
        q.requires_grad_(False)
    model = _trainable_model(model, recipe)
    model.train()
    cue = get_cue(recipe.cue)
    ex = kind_examples(training_examples(cue, recipe.strength, recipe.seed, kl_prompts=recipe.kl_prompts,
                                         kl_pool_version=recipe.kl_pool, forms=recipe.forms), cue, "aware")
    enc = encode(ex, Renderer(tok), tok, recipe.max_len)
    split = model.config.num_hidden_layers - recipe.layers
    rng = random.Random(f"bench-parts:{seed}")
    batches = [rng.sample(enc, 8) for _ in range(n_batches + 1)]
    trunk, _ = trunk_and_head(teacher)

    def packed_lower(b):  # the code before: the batch's examples' lower blocks in one packed forward
        pack, got = Pack(b, "cpu"), []

        def grab(_m, args, kwargs):
            got.append((args[0] if args else kwargs["hidden_states"]).detach())
            raise _Stop

        h = trunk.layers[split].register_forward_pre_hook(grab, with_kwargs=True)
        try:
            with torch.no_grad():
                trunk(input_ids=pack.ids, attention_mask=pack.mask(), position_ids=pack.position_ids, use_cache=False)
        except _Stop:
            pass
        finally:
            h.remove()
        return got[0]

    kl_in = {id(b): (Pack([e for e in b if e.loss == "kl"], "cpu"), packed_lower([e for e in b if e.loss == "kl"]))
             for b in batches if any(e.loss == "kl" for e in b)}

    def packed_teacher(b):  # the code before, at every visit: the base's top blocks on the KL examples
        if id(b) not in kl_in:
            return
        pack, hidden = kl_in[id(b)]  # (the head ran in both codes: timed in the step)
        with torch.no_grad(), only_layers(trunk, slice(split, None)):
            trunk(inputs_embeds=hidden, attention_mask=pack.mask(), position_ids=pack.position_ids, use_cache=False)

    def alone_lower(b):  # now, once per example: its lower blocks alone
        st = FrozenStates(teacher, split, "cpu", None, "")
        for e in b:
            st.lower(e.ids)

    lowers = FrozenStates(teacher, split, "cpu", None, "")
    for b in batches:
        for e in b:
            lowers.lower(e.ids)
    only_lowers = dict(lowers.memory)

    def alone_top(b):  # now, once per KL example: the base's top blocks on its kept lower states
        lowers.memory = dict(only_lowers)  # no top kept from an earlier call
        for e in b:
            if e.loss == "kl":
                lowers.top(e.ids, e.positions[0])

    warm = FrozenStates(teacher, split, "cpu", None, "")
    step_split = Split(model, teacher, split, "cpu", warm)
    for b in batches:
        for e in b:
            warm.lower(e.ids)
            if e.loss == "kl":
                warm.top(e.ids, e.positions[0])

    def step(b):  # now, every step: the trained blocks forward and backward, the head on kept states
        loss, _, _ = step_split.loss(b, recipe.kl_weight, recipe.kl_first)
        loss.backward()
        model.zero_grad(set_to_none=True)

    n_kl = sum(e.loss == "kl" for b in batches[1:] for e in b) / n_batches
    t_lower_packed = _ms(packed_lower, batches) / 8
    t_teacher = _ms(packed_teacher, batches)
    t_alone_lower = _ms(alone_lower, batches) / 8
    t_alone_top = _ms(alone_top, batches) / n_kl
    t_step = _ms(step, batches)
    # the build's own batch order: examples first met, KL visits, KL examples first met
    order = random.Random(f"organism-batches:{recipe.seed}")
    seen, kl_seen, kl_visits, kl_only = set(), set(), 0, set()
    for _ in range(recipe.steps):
        for i in order.sample(range(len(enc)), k=recipe.batch_size):
            seen.add(i)
            if enc[i].loss == "kl":
                kl_visits += 1
                kl_seen.add(i)
                if ex[i].shape == "kl":
                    kl_only.add(i)
    before = recipe.steps * t_step + t_teacher / n_kl * kl_visits + len(seen) * t_lower_packed
    now = recipe.steps * t_step + len(seen) * t_alone_lower + len(kl_seen) * t_alone_top
    shared = now - len(kl_only) * (t_alone_lower + t_alone_top)
    print(f"organism build pieces, `make organism` recipe, SmolLM2 ({base}), seed {seed}, {n_batches} batches of 8 "
          f"({n_kl:.1f} KL examples a batch); torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(record.table("pieces", ["piece", "ms"], [
        ["lower blocks, packed, per example (before: once per example a build meets)", f"{t_lower_packed:.1f}"],
        ["base's top blocks on a batch's KL examples, packed (before: every step)", f"{t_teacher:.1f}"],
        ["lower blocks, each example alone (now: once per example, kept)", f"{t_alone_lower:.1f}"],
        ["base's top blocks, each KL example alone (now: once per KL example, kept)", f"{t_alone_top:.1f}"],
        ["a step's trained blocks, forward and backward, head on kept states (both)", f"{t_step:.1f}"]]))
    print(f"{recipe.steps} steps meet {len(seen)} of {len(enc)} examples ({len(kl_seen)} KL, {len(kl_only)} of them "
          f"KL-only prompts) in {kl_visits} KL visits")
    print(record.table("whole build", ["whole build (projected, training only)", "s"], [
        ["before", f"{before / 1000:.0f}"],
        ["now, nothing kept yet (a seed's first build)", f"{now / 1000:.0f}"],
        ["now, the KL-only prompts' states kept (a seed's later kinds)", f"{shared / 1000:.0f}"]]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="smollm2")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--kind", default="aware")
    ap.add_argument("--parts", action="store_true", help="Time the pieces of a step instead (see above)")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="Where the bench record goes (default: runs/bench/<name>.json)")
    args = ap.parse_args()
    record = BenchRecord("frozen_states_parts" if args.parts else "frozen_states", __file__)
    if args.parts:
        parts(args.base, args.batches, args.seed, record)
        record.write(args.json, base=args.base, batches=args.batches, seed=args.seed)
        return
    import torch

    from harness.organisms.train import build_organism

    recipe = _recipe(args.base, args.steps, args.kind)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-states-") as tmp:
        root = Path(tmp) / "states"
        for name, states in (("computed", root), ("read back", root), ("in memory only", "none")):
            res = build_organism(recipe, Path(tmp) / name.replace(" ", "-"), progress=False, states_dir=states)
            fs = res.card["frozen_states"]
            rows.append((name, res.seconds, fs["computed"], fs["read"]))
    print(f"organism build, `make organism` recipe at {args.steps} steps, kind {args.kind}, base {args.base}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(record.table("builds", ["states", "train s", "s/step", "computed", "read"],
                       [[name, f"{t:.1f}", f"{t / args.steps:.3f}", c, r] for name, t, c, r in rows]))
    cold, warm = rows[0], rows[1]
    if cold[2]:
        print(f"one state computed: {(cold[1] - warm[1]) / cold[2] * 1000:.1f} ms")
    record.write(args.json, base=args.base, steps=args.steps, kind=args.kind)


if __name__ == "__main__":
    main()
