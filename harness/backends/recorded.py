"""Reopening the model something was made with (a run, a capture's run, a steering vector):
its recorded identity (:attr:`harness.backends.base.Backend.identity`) decides the engine
arguments (``-M``), so the same weights are never silently loaded as another model (``-M
num_hidden_layers=2`` makes a 2-layer model of a 30-layer checkpoint).

- :func:`engine_args_for`, before loading: no ``-M`` given -> the recorded ones; ``-M`` given on
  the same backend -> refused unless they are the recorded ones. Recorded ones made on another
  backend are not passed to this one (its arguments differ): refused unless ``-M`` is given.
- :func:`check_reopened`, after loading: the same weights under other engine arguments on the
  same backend are refused.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from harness.core.errors import EvalAwareError


def _args(d: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((d or {}).get("engine_args") or {})


def _flags(args: Mapping[str, Any]) -> str:
    return " ".join(f"-M {k}={json.dumps(v)}" for k, v in sorted(args.items())) or "no -M"


def engine_args_for(recorded: Mapping[str, Any] | None, given: Mapping[str, Any] | None, backend: str,
                    where: str) -> dict[str, Any] | None:
    """The engine arguments to reopen the model `recorded` names with on `backend` (`where`
    names what recorded it in an error); None for none."""
    want, got = _args(recorded), dict(given or {})
    made_on = (recorded or {}).get("backend")
    if not got:
        if want and made_on not in (None, backend):
            raise EvalAwareError(f"{where}: its model was loaded by {made_on} with {_flags(want)}; open it with "
                                 f"--backend {made_on}, or give the -M arguments that make the same model on {backend}")
        return want or None
    if made_on in (None, backend) and got != want:
        raise EvalAwareError(f"{where}: its model was loaded with {_flags(want)}; {_flags(got)} would load another "
                             f"model: give the recorded -M arguments, or none")
    return got


def check_reopened(recorded: Mapping[str, Any] | None, identity: Mapping[str, Any], where: str) -> None:
    """Refuse a loaded model (`identity`) with the recorded weights but other engine arguments on
    the same backend."""
    rec = recorded or {}
    same_weights = rec.get("weights_sha256") and rec.get("weights_sha256") == identity.get("weights_sha256")
    if same_weights and rec.get("backend") in (None, identity.get("backend")) and _args(rec) != _args(identity):
        raise EvalAwareError(f"{where}: its model was loaded with {_flags(_args(rec))}, the same weights are "
                             f"loaded here with {_flags(_args(identity))}: another model; give the recorded -M "
                             f"arguments")
