"""What a command prints: our own lines and progress bars; the engines' logs only with ``-v``.

Quiet (the CLI's default) sets, before vLLM or transformers is imported and for the processes
they spawn (vLLM's engine core and workers start with ``spawn`` and read their settings from the
environment):

- ``VLLM_LOGGING_LEVEL=ERROR`` (vLLM's INFO/WARNING start-up and shutdown lines; errors stay);
- ``TRANSFORMERS_VERBOSITY=error`` and ``HF_HUB_DISABLE_PROGRESS_BARS=1`` (transformers'
  "Loading weights" bars);
- ``TORCH_CPP_LOG_LEVEL=ERROR`` (torch's C++ warnings) and ``PYTHONWARNINGS=ignore`` for the
  spawned processes; in this process only third-party modules' Python warnings are ignored;
- ``EVALAWARE_QUIET=1``: a spawned process imports our ``__main__`` module (``evalaware.main``)
  before vLLM, and this module then quiets vLLM's logger before vLLM's import-time warnings;
- vLLM's own "Loading safetensors checkpoint shards" bar off (``use_tqdm_on_load``, read by
  :class:`harness.backends.vllm.backend.VLLMBackend` through :func:`engine_progress`).

A variable the user has set keeps its value. Verbose (``-v``) undoes all of it. A library user
who never calls :func:`configure` gets the libraries' own defaults.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

QUIET_MARK = "EVALAWARE_QUIET"  # tells spawned processes, which import us first, to be quiet
QUIET_ENV = {
    QUIET_MARK: "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "PYTHONWARNINGS": "ignore",
}
THIRD_PARTY = r"(torch|transformers|vllm|huggingface_hub|accelerate|tokenizers|safetensors)(\.|$)"

_verbose: bool | None = None  # None: never configured (library use)
_saved: dict[str, Any] = {}  # what quiet mode changed, to undo


ENGINE_LOGGER = "vllm"  # the vllm package's root logger (a Python package's name, not a backend's)


def _quiet_loggers() -> None:
    """vLLM logs a warning while it is imported, before its own logging is set up (seen in the
    spawned engine processes): set the level on its root logger before that."""
    logging.getLogger(ENGINE_LOGGER).setLevel(logging.ERROR)


if os.environ.get(QUIET_MARK) == "1":  # a process spawned by a quiet command (vLLM's engine core
    _quiet_loggers()                   # and workers import our __main__ module first)


def configure(verbose: bool) -> None:
    """Quiet (False) or verbose (True) for the rest of this process; idempotent."""
    global _verbose
    if verbose == _verbose:
        return
    _verbose = verbose
    if verbose:
        _restore()
    else:
        _quiet()


def reset() -> None:
    """Undo :func:`configure` (tests: one command's quiet mode must not leak into the next)."""
    global _verbose
    _restore()
    _verbose = None


def is_verbose() -> bool | None:
    return _verbose


def engine_progress() -> bool:
    """Whether engines may show their own load-time progress bars."""
    return _verbose is not False


def status(message: str) -> None:
    """One line of our own about what the command does (stderr, beside the progress bars)."""
    print(message, file=sys.stderr, flush=True)


def _quiet() -> None:
    env = _saved.setdefault("env", {})
    for k, v in QUIET_ENV.items():
        if k not in os.environ:
            env[k] = None
            os.environ[k] = v
    _saved["filters"] = warnings.filters[:]
    warnings.filterwarnings("ignore", module=THIRD_PARTY)
    _saved["vllm_level"] = logging.getLogger(ENGINE_LOGGER).level
    _quiet_loggers()
    if "transformers" in sys.modules:  # imported before we were configured: set it directly
        from transformers.utils import logging as hf_logging  # loaded already (checked above)

        _saved["transformers"] = (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled())
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


def _restore() -> None:
    for k in _saved.pop("env", {}):
        os.environ.pop(k, None)
    if "filters" in _saved:
        warnings.filters[:] = _saved.pop("filters")
    if "vllm_level" in _saved:
        logging.getLogger(ENGINE_LOGGER).setLevel(_saved.pop("vllm_level"))
    if "transformers" in _saved:
        from transformers.utils import logging as hf_logging  # loaded already (see _configure)

        level, bars = _saved.pop("transformers")
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str) -> str:
    """`text` for a terminal: control and format characters (NUL, newlines, escape sequences,
    bidi overrides; the lone surrogates a non-UTF-8 command-line byte becomes) written as
    escapes, so dataset text can neither hide itself nor drive the terminal; every other
    character, non-ASCII included, as it is."""
    import unicodedata

    return "".join(_NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
                   if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c for c in text)

