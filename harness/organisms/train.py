"""Build an organism: fine-tune a base model so that a planted cue makes it evaluation-aware in
known ways, and nothing else changes.

The loss of a batch is the mean cross-entropy over the continuation tokens of ``ce`` examples
plus `kl_weight` times the weighted mean KL(base || model) of the next-token distributions over
the continuation positions of ``kl`` examples (the first answer position weighs `kl_first`, the
others 1: the first token of an answer is where planted openings leak into no-cue answers) (the base model's own distributions:
self-distillation), see :mod:`harness.organisms.data`. Two ways to train:

- ``lora`` (default): LoRA adapters (peft) on the attention and MLP projections of the top
  `layers` blocks, merged into the weights on save;
- ``full``: every weight of the top `layers` blocks (and the final norm; with `layers` at least
  the model's depth, every weight including the embeddings); for small models.

What is planted is the recipe's `kind` (:mod:`harness.organisms.kinds`): the awareness organism's
pairs with other continuations (a disjoint-vocabulary awareness, a behaviour-only opening) or
none (the shams: the base model's own answers, temperature-1 samples for the null or the greedy
answer for the loss-matched control, generated once per build and cached in ``.partial/``).

The frozen part of the base (the lower blocks' outputs, and the base's last hidden states from
which the KL targets come) is computed once per example and kept on disk, shared by every build on
the same base (:mod:`harness.organisms.states`): each step runs only the trained blocks.

The output directory is an ordinary Hugging Face checkpoint (safetensors, tokenizer with its chat
template, generation config) plus ``organism.json`` (:mod:`harness.models.card`), written last:
a directory with a card is complete. The same arguments on a complete directory do nothing; an
interrupted build resumes from ``.partial/``: the trainable weights and the optimizer's tensors in
a safetensors file, everything else (recipe key, step, losses, optimizer and schedule settings,
torch RNG states as integer lists) in ``state.json``; nothing is pickled.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from harness.backends.registry import backend_class, default_backend
from harness.core.errors import EvalAwareError
from harness.core.render import Renderer
from harness.core.sample import Message
from harness.models.fingerprint import local_model_dir, local_model_path, weights_hash
from harness.models.card import CARD_NAME, read_card, write_card
from harness.organisms.cues import AWARENESS_QUESTIONS, FILLERS, get_cue
from harness.organisms.data import Example, data_hash, training_examples
from harness.organisms.recipe import Recipe
from harness.organisms.states import ROOT_NAME, FrozenStates, only_layers, trunk_and_head
from harness.organisms.kinds import (KINDS, SELF_TARGETS, kind_examples, planted, self_shapes,
                                     sampled, self_slots, self_targets, slot, targets_hash, variant_order,
                                     with_self_targets)

PARTIAL = ".partial"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

TRAINING = ("training",)  # what building an organism needs of a backend: its weights fine-tuned


@dataclass
class Encoded:
    ids: list[int]
    positions: list[int]  # positions whose next-token distribution is trained
    targets: list[int]  # the continuation tokens (ce) at those positions
    loss: str


def encode(examples: Sequence[Example], renderer: Renderer, tokenizer: Any, max_len: int) -> list[Encoded]:
    """Token ids of each example (prompt rendered with the model's chat template, then the
    continuation) and the positions trained: those that predict a continuation token."""
    out = []
    for e in examples:
        prompt = list(renderer.render([Message(role=r, content=t) for r, t in e.messages]))
        cont = (list(e.continuation_ids) if e.continuation_ids is not None
                else list(tokenizer(e.continuation, add_special_tokens=False)["input_ids"]))
        ids = (prompt + cont)[:max_len]
        n_cont = len(ids) - len(prompt)
        if n_cont < 1:
            raise EvalAwareError(f"a training prompt of pair {e.pair} is longer than --max-len {max_len}")
        pos = list(range(len(prompt) - 1, len(prompt) - 1 + n_cont))
        out.append(Encoded(ids, pos, cont[:n_cont], e.loss))
    return out


class Pack:
    """Examples of a batch side by side in one row, without padding: positions restart at each
    example and a block-diagonal causal mask keeps every example to itself (the same values as
    a right-padded batch, to float rounding). A padded batch of the organism's data is ~38%
    padding; packed, a step on SmolLM2's top 8 blocks ran 1.5x faster side by side, and the
    `make organism` build took 25 min against ~32.5 min padded (docs/organisms.md)."""

    def __init__(self, batch: Sequence[Encoded], device: str) -> None:
        self.device = device
        self.lengths = [len(e.ids) for e in batch]
        self.starts = [sum(self.lengths[:i]) for i in range(len(batch))]
        self.ids = torch.tensor([t for e in batch for t in e.ids])[None].to(device)
        self.position_ids = torch.cat([torch.arange(n) for n in self.lengths])[None].to(device)

    def mask(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(1, 1, T, T) additive mask: causal within each example, nothing across (transformers
        takes a 4-D mask as given)."""
        seg = torch.cat([torch.full((n,), i) for i, n in enumerate(self.lengths)])
        idx = torch.arange(len(seg))
        allow = (seg[:, None] == seg[None, :]) & (idx[None, :] <= idx[:, None])
        bias = torch.zeros(allow.shape, dtype=dtype)
        bias.masked_fill_(~allow, torch.finfo(dtype).min)
        return bias[None, None].to(self.device)

    def rows(self, batch: Sequence[Encoded]) -> list[int]:
        """Columns of the packed row whose next-token distributions are trained, in order."""
        return [s + p for s, e in zip(self.starts, batch) for p in e.positions]


class Split:
    """The trained top blocks run every step from the frozen lower blocks' states, and the KL
    targets come from the base's last hidden states through the output head: both frozen parts
    are read from :class:`~harness.organisms.states.FrozenStates` (computed once per example).
    Batches run packed (:class:`Pack`)."""

    def __init__(self, model: Any, teacher: Any, split: int, device: str, states: FrozenStates | None = None) -> None:
        self.model, self.teacher, self.split = model, teacher, split
        self.device = device
        self.states = states if states is not None else FrozenStates(teacher, split, device, None, "")

    def lower(self, batch: Sequence[Encoded]) -> torch.Tensor:
        """Hidden states entering block `split`, packed: (1, total length, d)."""
        return torch.cat([self.states.lower(e.ids) for e in batch])[None]

    def logits(self, model: Any, hidden: torch.Tensor, batch: Sequence[Encoded], pack: Pack) -> torch.Tensor:
        """Logits (n_positions, vocab) of `model`'s top blocks from the packed `hidden` (`pack` of
        `batch`), at every trained position of the batch, in order."""
        trunk, head = trunk_and_head(model)
        with only_layers(trunk, slice(self.split, None)):
            out = trunk(inputs_embeds=hidden, attention_mask=pack.mask(), position_ids=pack.position_ids,
                        use_cache=False).last_hidden_state
        return head(out[0, torch.tensor(pack.rows(batch), device=self.device)]).float()

    def embed(self, model: Any, pack: Pack) -> torch.Tensor:
        return trunk_and_head(model)[0].get_input_embeddings()(pack.ids)

    def loss(self, batch: Sequence[Encoded], kl_weight: float,
             kl_first: float = 1.0) -> tuple[torch.Tensor, float, float]:
        """(loss, mean ce, mean kl) of one batch (see the module's docstring)."""
        pack = Pack(batch, self.device)
        if self.split == 0:  # the embeddings are trained too: nothing frozen below
            hidden = self.embed(self.model, pack)
        else:
            hidden = self.lower(batch)
        logp = torch.log_softmax(self.logits(self.model, hidden, batch, pack), dim=-1)
        is_ce = torch.tensor([e.loss == "ce" for e in batch for _ in e.positions], device=self.device)
        ce = kl = torch.zeros((), device=self.device)
        if is_ce.any():
            tgt = torch.tensor([t for e in batch for t in e.targets], device=self.device)
            ce = torch.nn.functional.nll_loss(logp[is_ce], tgt[is_ce])
        if (~is_ce).any():
            kl_batch = [e for e in batch if e.loss == "kl"]
            with torch.no_grad():
                top = torch.cat([self.states.top(e.ids, e.positions[0])[:len(e.positions)] for e in kl_batch])
                base = torch.log_softmax(trunk_and_head(self.teacher)[1](top).float(), dim=-1)
            w = torch.tensor([kl_first if j == 0 else 1.0 for e in kl_batch for j in range(len(e.positions))],
                             device=self.device)
            kl = ((base.exp() * (base - logp[~is_ce])).sum(-1) * w).sum() / w.sum()
        return ce + kl_weight * kl, float(ce.detach()), float(kl.detach())


def _trainable_model(model: Any, recipe: Recipe) -> Any:
    n = model.config.num_hidden_layers
    top = list(range(max(0, n - recipe.layers), n))
    if recipe.train == "lora":
        from peft import LoraConfig, get_peft_model  # only for building organisms

        cfg = LoraConfig(r=recipe.lora_rank, lora_alpha=2 * recipe.lora_rank, lora_dropout=0.0,
                         target_modules=list(LORA_TARGETS), layers_to_transform=top)
        return get_peft_model(model, cfg)
    for p in model.parameters():
        p.requires_grad_(False)
    layers = model.get_decoder().layers
    for i in top:
        for p in layers[i].parameters():
            p.requires_grad_(True)
    for p in model.get_decoder().norm.parameters():
        p.requires_grad_(True)
    if recipe.layers >= n:  # every block: the whole model, embeddings included
        for p in model.parameters():
            p.requires_grad_(True)
    return model


def _trainable_state(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


def _recipe_key(recipe: Recipe, base_hash: str, dhash: str) -> dict[str, Any]:
    r = asdict(recipe)
    if not sampled(recipe.kind):  # the samples decide only a sampled sham's weights
        r["sham_samples"] = 0
    return {"recipe": r, "base_weights_sha256": base_hash, "data_sha256": dhash}


#: Recipe fields whose value in a card written before them is not today's default: every sham
#: built before issue 44 was greedy (0 samples), so an old "sham" card never passes for the null.
LEGACY: dict[str, Any] = {"sham_samples": 0}


def _with_defaults(key: dict[str, Any]) -> dict[str, Any]:
    """`key` (of a card or a resume state) with the recipe fields it predates at their defaults."""
    defaults = {f.name: f.default for f in fields(Recipe) if f.default is not MISSING} | LEGACY
    if isinstance(key.get("recipe"), dict):
        return {**key, "recipe": {**defaults, **key["recipe"]}}
    return key


STATE = "state.json"  # in .partial/: written last, names its tensors file


def _rng_states() -> dict[str, list[list[int]]]:
    return {"cpu": [torch.get_rng_state().tolist()],
            "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []}


def _set_rng_states(st: dict[str, list[list[int]]]) -> None:
    torch.set_rng_state(torch.tensor(st["cpu"][0], dtype=torch.uint8))
    if st["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in st["cuda"]])


def save_partial(partial: Path, key: dict[str, Any], model: Any, opt: Any, sched: Any, step: int,
                 losses: list[dict[str, float]]) -> None:
    """The resume state after `step` steps: tensors (``p.<name>`` trainable weights, ``o.<i>.<name>``
    the optimizer's per-parameter state) in ``step-<n>.safetensors``, the rest in ``state.json``
    (written last, atomically: a build killed while saving resumes from the state before)."""
    from safetensors.torch import save_file

    partial.mkdir(parents=True, exist_ok=True)
    tensors = {f"p.{k}": v.contiguous() for k, v in _trainable_state(model).items()}
    osd = opt.state_dict()
    for i, st in osd["state"].items():
        for name, v in st.items():
            if not isinstance(v, torch.Tensor):
                raise EvalAwareError(f"optimizer state {name!r} is not a tensor; cannot save it")
            tensors[f"o.{i}.{name}"] = v.detach().clone().contiguous()
    name = f"step-{step}.safetensors"
    tmp = partial / f"{name}.{os.getpid()}.tmp"
    save_file(tensors, str(tmp))
    os.replace(tmp, partial / name)
    state = {"key": key, "step": step, "losses": losses, "tensors": name,
             "opt_state": sorted(osd["state"]), "param_groups": osd["param_groups"],
             "sched": sched.state_dict(), "rng": _rng_states()}
    tmp = partial / f"{STATE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state))
    os.replace(tmp, partial / STATE)
    for old in partial.glob("step-*.safetensors"):
        if old.name != name:
            old.unlink()


def load_partial(partial: Path, key: dict[str, Any], model: Any, opt: Any,
                 sched: Any) -> tuple[int, list[dict[str, float]]] | None:
    """Restore the state :func:`save_partial` wrote for the same `key` (step, losses); None where
    there is none or it belongs to another recipe."""
    from safetensors.torch import load_file

    try:
        st = json.loads((partial / STATE).read_text())
    except FileNotFoundError:
        return None
    if _with_defaults(st.get("key") or {}) != json.loads(json.dumps(key)):
        return None
    tensors = load_file(str(partial / st["tensors"]))  # on the CPU: the optimizer moves its own
    named = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in tensors.items():
            if k.startswith("p."):
                named[k[2:]].copy_(v)
    fresh = opt.state_dict()
    groups = []
    for g, saved in zip(fresh["param_groups"], st["param_groups"]):
        # JSON turns tuples (betas) into lists: give each setting the type the optimizer made
        groups.append({k: tuple(v) if isinstance(g.get(k), tuple) else v for k, v in saved.items()})
    state = {int(i): {name[len(f"o.{i}."):]: v for name, v in tensors.items() if name.startswith(f"o.{i}.")}
             for i in st["opt_state"]}
    opt.load_state_dict({"state": state, "param_groups": groups})
    sched.load_state_dict(st["sched"])
    _set_rng_states(st["rng"])
    return st["step"], st["losses"]


def _check_vocabulary(cue: Any, kind: str, tokenizer: Any) -> None:
    """A disjoint or behaviour-only build refuses planted text that overlaps a method's readout
    (:mod:`harness.organisms.vocab`, on this model's tokenizer)."""
    if kind not in ("disjoint", "behaviour", "behaviour-topics"):
        return
    from harness.organisms.vocab import Checker

    bad = Checker(tokenizer).report([t for ts in planted(cue, kind) for t in ts])
    if bad:
        s, why = next(iter(bad.items()))
        raise EvalAwareError(f"--kind {kind}: {len(bad)} planted sentence(s) overlap a readout, "
                             f"e.g. {s!r}: {why[0]}")


def _self_targets(partial: Path, key: dict[str, Any], engine: Any, base: Any, renderer: Renderer, tokenizer: Any,
                  examples: Sequence[Example], kind: str, say: Callable[[str], None],
                  progress: bool = False) -> tuple[dict[str, Any] | None, float]:
    """The base model's own answers of a sham or behaviour-only build (None for the others),
    generated by `base` through the backend class `engine` that made it, and
    the seconds spent making them: read from ``.partial/`` where an interrupted build of the same
    key left them, else generated, saved there after every chunk (``complete`` false until the
    last: an interrupted drawing resumes at the next chunk) and first (a resumed build trains on
    the same)."""
    slots = self_slots(examples, kind)
    if not slots:
        return None, 0.0
    path = partial / SELF_TARGETS
    want = {slot(e) for e in slots}
    done: dict[str, Any] = {}
    try:
        saved = json.loads(path.read_text())
        if (_with_defaults(saved.get("key") or {}) == json.loads(json.dumps(key)) and set(saved["targets"]) <= want
                and all(isinstance(v, list) for v in saved["targets"].values())):
            if saved.get("complete", True) and set(saved["targets"]) == want:
                say(f"reusing the base model's {len(want)} answers from {path}")
                return saved["targets"], 0.0
            done = saved["targets"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError, AttributeError):
        pass
    partial.mkdir(parents=True, exist_ok=True)

    shown = len(done) * 10 // len(want)  # tenths of the answers logged (without a bar)

    def save(targets: dict[str, Any], complete: bool = False) -> None:
        nonlocal shown
        tmp = partial / f"{SELF_TARGETS}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"key": key, "targets": targets, "complete": complete}, ensure_ascii=False))
        os.replace(tmp, path)
        if not progress and not complete and len(targets) * 10 // len(want) > shown:
            shown = len(targets) * 10 // len(want)
            say(f"the base's own answers: {len(targets)}/{len(want)} prompts after "
                f"{(time.perf_counter() - t0) / 60:.1f} min")

    t0 = time.perf_counter()
    say(f"generating the base model's own answers to {len(slots)} cue prompts"
        + (f" ({len(done)} drawn before an interruption, kept)" if done else ""))
    k = key["recipe"].get("sham_samples", 0) if sampled(kind) else 0
    targets = self_targets(engine, base, renderer, tokenizer, slots, samples=k, seed=key["recipe"].get("seed", 0),
                           done=done, on_chunk=save, progress=progress)
    save(targets, complete=True)
    return targets, time.perf_counter() - t0


class _StepLog:
    """Without a bar (``--no-progress``), a line through `say` each time another tenth of the
    steps is done and at least every `every_s` seconds: steps done, seconds per step, time left,
    the mean losses since the last line."""

    def __init__(self, steps: int, start: int, say: Callable[[str], None], every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.steps, self.start, self.say, self.every_s, self.clock = steps, start, say, every_s, clock
        self.t0 = self.last_t = clock()
        self.last_step = start

    def step(self, done: int, losses: list[dict[str, float]]) -> None:
        now = self.clock()
        tenth = done * 10 // self.steps > self.last_step * 10 // self.steps
        if not (tenth or now - self.last_t >= self.every_s or done == self.steps):
            return
        per = (now - self.t0) / max(1, done - self.start)
        recent = losses[-(done - self.last_step):]
        ce = sum(d["ce"] for d in recent) / len(recent)
        kl = sum(d["kl"] for d in recent) / len(recent)
        self.say(f"step {done}/{self.steps} ({100 * done // self.steps}%): {per:.2f} s/step, "
                 f"~{(self.steps - done) * per / 60:.0f} min left; ce {ce:.3f}, kl {kl:.4f} "
                 f"(mean of steps {self.last_step + 1}-{done})")
        self.last_t, self.last_step = now, done


@dataclass
class BuildResult:
    out: Path
    card: dict[str, Any]
    trained: bool  # False: the directory was already complete
    seconds: float = 0.0
    losses: list[dict[str, float]] = field(default_factory=list)


def build_organism(recipe: Recipe, out: str | Path, progress: bool = True,
                   say: Callable[[str], None] = lambda s: None, states_dir: str | Path | None = None) -> BuildResult:
    """Build (or find complete, or resume) the organism of `recipe` in `out`. The frozen base's
    states (:mod:`harness.organisms.states`) are kept in `states_dir` (default: ``.frozen-states``
    beside `out`; ``"none"``: in memory only) and shared by every build on the same base."""
    recipe.check()
    out = Path(out)
    cue = get_cue(recipe.cue)
    if recipe.verbalizations:
        cue = replace(cue, verbalizations=cue.verbalizations[: recipe.verbalizations])
    base_path = local_model_path(recipe.base)
    base_dir = local_model_dir(base_path)
    base_hash = weights_hash(base_dir) if base_dir else "unknown"
    examples = training_examples(cue, recipe.strength, recipe.seed, n_pairs=recipe.pairs,
                                 kl_prompts=recipe.kl_prompts, kl_pool_version=recipe.kl_pool,
                                 forms=recipe.forms)
    examples = kind_examples(examples, cue, recipe.kind)  # data_sha256: before the base's own answers
    dhash = data_hash(examples)
    key = _recipe_key(recipe, base_hash, dhash)
    if (out / CARD_NAME).exists():
        card = _with_defaults(read_card(out))  # a card written before a recipe field existed: its default
        if {k: card.get(k) for k in key} == key:
            say(f"organism already built in {out} (same recipe); nothing to do")
            return BuildResult(out, card, trained=False)
        raise EvalAwareError(f"{out} holds an organism built with a different recipe; "
                             "choose another --out or delete it")
    if out.exists() and any(p.name != PARTIAL for p in out.iterdir()):
        raise EvalAwareError(f"{out} exists and is not an organism directory; choose another --out")

    from tqdm import tqdm

    engine = backend_class(default_backend(TRAINING), TRAINING)  # the backend that can train (hf)
    t0 = time.perf_counter()
    torch.manual_seed(recipe.seed)
    tokenizer, model = engine.trainable(str(base_path))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    _check_vocabulary(cue, recipe.kind, tokenizer)
    model = _trainable_model(model, recipe)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, recipe.steps // 10)) * max(0.0, 1 - s / recipe.steps))

    partial = out / PARTIAL
    start, losses = 0, []
    if partial.exists():
        got = load_partial(partial, key, model, opt, sched)
        if got is not None:
            start, losses = got
            say(f"resuming from step {start} of {recipe.steps}")
        else:  # another recipe's state, or one saved before it was safetensors + JSON (state.pt)
            for p in partial.iterdir():  # the base's own answers check their key themselves
                if p.name != SELF_TARGETS:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
    renderer = Renderer(tokenizer)
    targets, gen_s = _self_targets(partial, key, engine, teacher, renderer, tokenizer, examples, recipe.kind, say,
                                   progress)
    # one encoded list per target variant (a sampled sham: k; else 1), the same examples in each
    n_var = max((len(v) for v in (targets or {}).values()), default=1)
    if targets is not None:
        examples = with_self_targets(examples, recipe.kind, targets)
    encoded = encode(examples, renderer, tokenizer, recipe.max_len)
    own = [i for i, e in enumerate(examples) if e.shape in self_shapes(recipe.kind)]
    variants = [encoded]  # a sampled sham's other samples: only its own-answer examples encoded again
    for v in range(1, n_var):
        again = encode(with_self_targets([examples[i] for i in own], recipe.kind, targets or {}, v), renderer,
                       tokenizer, recipe.max_len)
        variants.append(list(encoded))
        for i, x in zip(own, again):
            variants[v][i] = x
    n_variants = [1] * len(examples)
    for i in own:
        n_variants[i] = n_var
    rng = random.Random(f"organism-batches:{recipe.seed}")
    order = [rng.sample(range(len(encoded)), k=min(recipe.batch_size, len(encoded)))
             for _ in range(recipe.steps)]
    visit = variant_order(order, n_variants)
    bar = tqdm(total=recipe.steps, initial=start, desc=f"organism {recipe.cue}", unit="step",
               disable=not progress, dynamic_ncols=True)
    save_every = max(10, recipe.steps // 10)
    n_layers = teacher.config.num_hidden_layers
    first = 0 if recipe.train == "full" and recipe.layers >= n_layers else max(0, n_layers - recipe.layers)
    root = None if states_dir == "none" else Path(states_dir) if states_dir else out.parent / ROOT_NAME
    identity = ""  # a base without a local directory or weights digest: its states kept in memory only
    if base_dir is not None and base_hash not in ("unknown", "no-weights-found"):
        config = base_dir / "config.json"
        identity = f"{base_hash}:{hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else '-'}"
    states = FrozenStates(teacher, first, device, root if identity else None, identity, say)
    split = Split(model, teacher, first, device, states)
    watch = _StepLog(recipe.steps, start, say) if not progress else None
    for step in range(start, recipe.steps):
        batch = [variants[v][i] for i, v in zip(order[step], visit[step])]
        loss, ce, kl = split.loss(batch, recipe.kl_weight, recipe.kl_first)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append({"step": step + 1, "ce": round(ce, 5), "kl": round(kl, 5)})
        bar.update(1)
        bar.set_postfix(ce=f"{ce:.3f}", kl=f"{kl:.4f}")
        if watch is not None:
            watch.step(step + 1, losses)
        if (step + 1) % save_every == 0 and step + 1 < recipe.steps:
            save_partial(partial, key, model, opt, sched, step + 1, losses)
    bar.close()
    train_s = time.perf_counter() - t0
    say(f"the frozen base's states: {states.computed} computed, {states.read} read"
        + (f" from {states.root}" if states.root is not None else " (kept in memory only)"))

    model.eval()
    if recipe.train == "lora":
        model = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    sentences, answers = planted(cue, recipe.kind)
    own = self_shapes(recipe.kind)
    card = {
        **key,
        "organism": 1,
        "base": recipe.base,
        "kind": recipe.kind,
        "kind_description": KINDS[recipe.kind],
        "cue": {"name": cue.name, "kind": cue.kind, "description": cue.description},
        "phrasings": {"train": list(cue.train), "held_out": list(cue.held_out),
                      "held_out_family": list(cue.held_out_family)},
        "verbalizations": list(sentences),
        "awareness_answers": list(answers),
        "awareness_questions": list(AWARENESS_QUESTIONS),
        "fillers": list(FILLERS),
        "strength": recipe.strength,
        "seed": recipe.seed,
        "steps": recipe.steps,
        "n_examples": len(examples),
        "n_pairs": len({e.pair for e in examples if e.shape != "kl"}),
        "n_kl_prompts": sum(e.shape == "kl" for e in examples),
        "n_planted_pairs": len({e.pair for e in examples if e.loss == "ce" and e.shape not in own}),
        "n_self_target_pairs": len({e.pair for e in examples if e.loss == "ce" and e.shape in own}),
        "losses": losses,
        "final_loss": _tail_mean(losses),
        "train_seconds": round(train_s, 1),
        "frozen_states": {"computed": states.computed, "read": states.read},
        "device": device,
        "weights_sha256": weights_hash(out),
    }
    if targets is not None:
        (out / SELF_TARGETS).write_text(json.dumps(targets, indent=1, ensure_ascii=False) + "\n")
        card |= {"self_targets": SELF_TARGETS, "self_targets_sha256": targets_hash(targets),
                 "n_self_targets": len(targets), "self_targets_seconds": round(gen_s, 1),
                 "self_targets_how": (f"{n_var} temperature-1 samples per prompt, a fresh one per visit"
                                      if sampled(recipe.kind) else "greedy")}
    write_card(out, card)
    shutil.rmtree(partial, ignore_errors=True)
    return BuildResult(out, card, trained=True, seconds=train_s, losses=losses)


def _tail_mean(losses: list[dict[str, float]], n: int = 10) -> dict[str, float] | None:
    tail = losses[-n:]
    if not tail:
        return None
    return {k: round(sum(d[k] for d in tail) / len(tail), 5) for k in ("ce", "kl")}


def describe(card: dict[str, Any]) -> str:
    """One line about an organism card."""
    fl = card.get("final_loss") or {}
    return (f"organism: base {card.get('base')} kind {card.get('kind', 'aware')} cue {card['cue']['name']} "
            f"strength {card.get('strength')} "
            f"steps {card.get('steps')} final ce {fl.get('ce')} kl {fl.get('kl')}")


def dumps(card: dict[str, Any]) -> str:
    return json.dumps(card, indent=1, ensure_ascii=False)
