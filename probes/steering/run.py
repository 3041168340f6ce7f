"""`evalaware steer run`: run methods under steering conditions, one run directory each.

``OUT/steer.json`` lists the conditions; ``OUT/<condition>/`` is an ordinary run directory
(store, manifest, results.jsonl), so ``show``, ``export`` and ``report`` work on it as on any run.
Conditions: ``unsteered_0`` (alpha = 0: no hook, the unsteered identity, so it shares cache keys
with a plain ``evalaware run`` and imports the source run's call cache when available), then
``vector_<alpha>`` and, by default, :data:`N_RANDOM` random controls per non-zero alpha:
``random_<alpha>``, ``random1_<alpha>``, ... (direction k: a Gaussian direction per layer drawn
with seed ``seed + k``, norm-matched: the vector's scale at each layer). One random direction is
one draw, not a control distribution: the report ranks the vector among the random directions
and gives a paired vector − random interval. A vector built with unrelated-contrast controls
(:mod:`probes.steering.contrasts`) also runs ``contrast-<name>_<alpha>`` per contrast and non-zero
alpha, scaled as the vector is, and the report ranks the vector among them too. Each condition's backend identity carries its
steering (:class:`harness.backends.steered.Steering`), so every call is cached per condition and
an interrupted ``steer run`` resumes where it stopped.

Sanity: each condition also scores a fixed neutral text (:data:`NEUTRAL_TEXT`) through the same
steered, cached backend and stores its perplexity, with the condition's settings, in the
meta key ``steering`` (entry ``sanity``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.backends.base import Backend
from harness.backends.steered import SteeredBackend, Steering
from harness.backends.cache import CachedBackend
from harness.core.atomic import write_text
from harness.core.errors import EvalAwareError
from harness.run.loop import run_methods
from harness.core.sample import Sample
from harness.runlog import RunLog

from probes.steering.direction import CONTRAST, SteeringVector

NEUTRAL_TEXT = (
    "The river runs through the middle of the town, past the market square and under three old "
    "stone bridges. In spring the water rises with the melting snow from the hills, and in late "
    "summer it slows to a shallow stream where children look for smooth stones. The town library "
    "stands on the east bank. It opens at nine in the morning and closes at six in the evening, "
    "except on Sundays, when it stays closed. Most visitors come for the local history room, "
    "which keeps maps, letters and photographs from the last two hundred years."
)
"""Fixed text whose perplexity under each condition shows when steering breaks the model."""

PLAN_FILE = "steer.json"
#: Random directions per alpha by default (the control distribution the vector is ranked in).
N_RANDOM = 20


@dataclass(frozen=True)
class Condition:
    control: str  # "none" | "vector" | "random" | "contrast"
    alpha: float
    k: int = 0  # which random direction (seed + k)
    contrast: str = ""  # which unrelated contrast

    @property
    def name(self) -> str:
        if self.control == "none":
            return "unsteered_0"
        if self.control == "contrast":
            return f"contrast-{self.contrast}_{self.alpha:+g}"
        return f"{self.control}{self.k or ''}_{self.alpha:+g}"

    @property
    def direction(self) -> str:
        """The control as :meth:`SteeringVector.unit` names it."""
        return f"{CONTRAST}{self.contrast}" if self.control == "contrast" else self.control

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "control": self.control, "alpha": self.alpha, "k": self.k,
                **({"contrast": self.contrast} if self.contrast else {})}


def conditions(alphas: Sequence[float], random_control: bool = True,
               n_random: int = N_RANDOM, contrasts: Sequence[str] = ()) -> list[Condition]:
    """alpha = 0 once (unsteered), then vector (and `n_random` random directions, and each of
    `contrasts`) for every non-zero alpha."""
    out = [Condition("none", 0.0)]
    for a in sorted(set(float(a) for a in alphas)):
        if a == 0:
            continue
        out.append(Condition("vector", a))
        if random_control:
            out += [Condition("random", a, k) for k in range(n_random)]
        out += [Condition("contrast", a, contrast=c) for c in contrasts]
    return out


def steering_for(vec: SteeringVector, cond: Condition, layers: Sequence[int], positions: str,
                 seed: int) -> Steering:
    if cond.control == "none":
        return Steering({}, positions, {})
    rseed = seed + cond.k
    label = {"vector_sha256": vec.sha256, "control": cond.control, "alpha": cond.alpha,
             "scale": "alpha * unit * mean residual norm", "seed": rseed if cond.control == "random"
             else None, **({"contrast": cond.contrast} if cond.contrast else {})}
    return Steering(vec.additions(layers, cond.alpha, cond.direction, rseed), positions, label)


def condition_line(k: int, n: int, name: str, elapsed: float) -> str:
    """`condition k+1 of n: name`, with the time so far and, once one condition is done, the
    time left at the mean pace so far (conditions run alike: the same samples and methods)."""
    line = f"condition {k + 1} of {n}: {name}"
    if k:
        left = elapsed / k * (n - k)
        line += f" ({elapsed / 60:.1f} min so far, ~{left / 60:.1f} min left)"
    return line


def neutral_perplexity(backend: Backend, text: str = NEUTRAL_TEXT) -> dict[str, Any]:
    """Perplexity of `text` (all tokens after the first, teacher-forced) under `backend`."""
    ids = list(backend.tokenizer(text, add_special_tokens=True)["input_ids"])
    ll = backend.loglikelihood([(ids[:1], ids[1:])])[0]
    n = len(ids) - 1
    return {"perplexity": math.exp(-ll / n), "loglikelihood": ll, "tokens": n,
            "text_sha256": hashlib.sha256(text.encode()).hexdigest()}


def select_samples(samples: list[Sample], vec: SteeringVector, which: str) -> list[Sample]:
    """`heldout`: the vector's held-out samples present in the dataset; `all`: every sample."""
    if which == "all":
        return samples
    if which != "heldout":
        raise EvalAwareError(f"--samples {which!r}: use heldout or all")
    held = vec.meta.get("heldout_ids")
    if held is None:
        raise EvalAwareError("the vector records no held-out samples (built from pairs?); "
                             "pass --samples all")
    keep = set(held)
    out = [s for s in samples if s.id in keep]
    if not out:
        raise EvalAwareError("none of the vector's held-out samples is in this dataset; "
                             "pass --samples all")
    return out


def steer_run(vec: SteeringVector, backend: Backend, samples: list[Sample], methods: Sequence[str],
              out: str | Path, layers: Sequence[int], alphas: Sequence[float],
              positions: str = "all", random_control: bool = True, seed: int = 0,
              n_random: int = N_RANDOM, reuse_run: str | Path | None = None, progress: bool = True,
              contrast_controls: bool = True, **run_kwargs: Any) -> dict[str, Any]:
    """Run every condition (with `contrast_controls`, the vector's unrelated contrasts too);
    returns the plan written to ``OUT/steer.json``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    layers = sorted(set(int(l) for l in layers))
    missing = [l for l in layers if l not in vec.directions]
    if missing:
        raise EvalAwareError(f"--layers {missing}: not in the vector (it has {vec.layers})")
    conds = conditions(alphas, random_control, n_random, sorted(vec.contrasts) if contrast_controls else ())
    plan = {"vector": str(vec.path) if vec.path else None, "vector_sha256": vec.sha256,
            "vector_source": vec.meta.get("source"), "pooling": vec.meta.get("pooling"),
            "layers": layers, "norms": {str(l): vec.norms[l] for l in layers},
            "alphas": sorted(set(float(a) for a in alphas) | {0.0}), "positions": positions,
            "random_seed": seed, "methods": list(methods), "samples": [s.id for s in samples],
            "model_identity": backend.identity,
            "conditions": [c.to_dict() for c in conds]}
    old = out / PLAN_FILE
    if old.exists():  # a later call may add alphas or methods; nothing else may change
        prev = json.loads(old.read_text())
        for k in ("vector_sha256", "layers", "positions", "random_seed", "samples"):
            if prev.get(k) != json.loads(json.dumps(plan[k])):
                raise EvalAwareError(f"{out}: made with a different {k}; use a new --out")
        known = {c["name"]: c for c in prev["conditions"] + plan["conditions"]}
        plan["conditions"] = list(known.values())
        plan["alphas"] = sorted(set(prev["alphas"]) | set(plan["alphas"]))
        plan["methods"] = list(dict.fromkeys(prev["methods"] + plan["methods"]))
    plan["conditions"].sort(key=lambda c: (c["control"] != "none", c["alpha"], c["control"], c.get("k", 0),
                                           c.get("contrast", "")))
    write_text(old, json.dumps(plan, indent=1, sort_keys=True))
    steered = {c.name: steering_for(vec, c, layers, positions, seed) for c in conds}
    for s in steered.values():  # refuse bad layers / positions before any work
        if not s.is_null:
            backend.check_steering(s)
    t0 = time.monotonic()
    for k, c in enumerate(conds):
        run_dir = out / c.name
        sb = SteeredBackend(backend, steered[c.name])
        if c.control == "none" and reuse_run and (Path(reuse_run) / "store.sqlite").exists():
            st = RunLog(run_dir)
            st.import_calls(reuse_run)
            st.close()
        info = {"condition": c.name, "control": c.control, "alpha": c.alpha, "layers": layers,
                "positions": positions, "vector": plan["vector"], "vector_sha256": vec.sha256,
                "random_seed": seed + c.k if c.control == "random" else None, "random_k": c.k,
                "contrast": c.contrast or None,
                "steering_sha256": None if steered[c.name].is_null else steered[c.name].digest()}
        if progress:
            print(f"[steer] {condition_line(k, len(conds), c.name, time.monotonic() - t0)}", flush=True)
        run_methods(samples, methods, sb, run_dir, progress=progress,
                    extra_manifest={"steering": info}, **run_kwargs)
        st = RunLog(run_dir, create=False)
        try:
            sanity = neutral_perplexity(CachedBackend(sb, st))
            st.set_meta("steering", {**info, "sanity": sanity})
        finally:
            st.close()
    return plan
