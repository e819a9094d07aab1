"""A client of Sextant's environments for trainers, on the standard library alone."""

from ._errors import SextantConnectionError, SextantError
from ._http import VERSION as __version__
from .client import Client, Session, Sessions, StepResult, Tasksets, VerifyResult
from .rollouts import RolloutEvent, RolloutRun, Rollouts
from .taskset_map import TaskRef, TaskSetMap, load_taskset_map

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
    "TaskRef",
    "TaskSetMap",
    "Tasksets",
    "VerifyResult",
    "load_taskset_map",
    "__version__",
]
