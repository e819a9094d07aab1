"""A client of Sextant's environments for trainers, on the standard library alone."""

from ._errors import SextantConnectionError, SextantError
from ._http import VERSION as __version__
from .client import Client, Session, Sessions, StepResult, Tasksets, VerifyResult
from .rollouts import RolloutEvent, RolloutRun, Rollouts

__all__ = [
    "Client",
    "RolloutEvent",
    "RolloutRun",
    "Rollouts",
    "Session",
    "Sessions",
    "SextantConnectionError",
    "SextantError",
    "StepResult",
    "Tasksets",
    "VerifyResult",
    "__version__",
]
