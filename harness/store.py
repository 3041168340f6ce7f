"""Former name of the run log, kept importable for code written against it: use
:mod:`harness.runlog` (``RunLog``) in new code."""

from .runlog import LOG_NAME as STORE_NAME
from .runlog import RunLog as Store
from .runlog import decode_value, encode_value

__all__ = ["Store", "STORE_NAME", "encode_value", "decode_value"]
