"""The snapshot, backfill and incremental algorithm, written once for every dialect.

No database code and no Spark here: :mod:`.assigner` decides what to read next,
:mod:`.reader` reads a split, :mod:`.incremental` filters the log phase, :mod:`.state` is the
serialisable progress, :mod:`.machine` is the one phase state machine over it, and
:mod:`.policy` decides what schema changes, truncations and snapshot requests do, and
:mod:`.runner` drives the machine in one process (:mod:`sdk.spark` drives it on Spark).
"""

from .assigner import SplitAssigner, TablePlan, choose_key
from .incremental import IncrementalFilter
from .machine import Batch, PhaseMachine, log_filter
from .policy import truncation_error
from .reader import (
    PhaseHooks,
    SharedView,
    SplitResult,
    apply_to_buffer,
    read_split,
)
from .runner import SyncRunner, caught_up
from .settings import StartupMode, SyncOptions
from .state import Phase, SyncState

__all__ = [
    "Batch",
    "IncrementalFilter",
    "Phase",
    "PhaseHooks",
    "PhaseMachine",
    "SharedView",
    "SplitAssigner",
    "SplitResult",
    "StartupMode",
    "SyncOptions",
    "SyncRunner",
    "SyncState",
    "TablePlan",
    "apply_to_buffer",
    "caught_up",
    "choose_key",
    "log_filter",
    "read_split",
    "truncation_error",
]
