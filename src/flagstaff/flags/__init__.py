"""Feature flag engine: pure, bucket-for-bucket compatible with PostHog."""

from flagstaff.flags.engine import CompiledFlags, compile_flags, evaluate, evaluate_checked
from flagstaff.flags.model import EvalRequest, FlagResult
from flagstaff.flags.runtime import detect_runtime
from flagstaff.flags.validation import validate_flag

__all__ = [
    "CompiledFlags",
    "EvalRequest",
    "FlagResult",
    "compile_flags",
    "detect_runtime",
    "evaluate",
    "evaluate_checked",
    "validate_flag",
]
