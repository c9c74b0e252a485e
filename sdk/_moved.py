"""The modules' old import paths (before ``sdk/`` was grouped by who uses it), kept as
aliases for one release: importing one warns and gives the module at its new path."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    "sdk.apply": "sdk.dialect.apply",
    "sdk.arrow": "sdk.dialect.arrow",
    "sdk.codec": "sdk.dialect.codec",
    "sdk.config": "sdk.dialect.config",
    "sdk.dialects": "sdk.dialect.manager",
    "sdk.errors": "sdk.dialect.errors",
    "sdk.hookspecs": "sdk.dialect.hookspecs",
    "sdk.options": "sdk.dialect.options",
    "sdk.sql": "sdk.dialect.sql",
    "sdk.sqlbase": "sdk.dialect.sqlbase",
    "sdk.tableformat": "sdk.dialect.tableformat",
    "sdk.temporal": "sdk.dialect.temporal",
    "sdk.types": "sdk.dialect.types",
    "sdk.schema": "sdk.algorithm.schema",
    "sdk.algorithm.options": "sdk.algorithm.settings",
    "sdk.failures": "sdk.job.failures",
    "sdk.metrics": "sdk.job.metrics",
    "sdk.spec": "sdk.job.spec",
    "sdk.tables": "sdk.job.tables",
    "sdk.target": "sdk.job.target",
    "sdk.cli": "sdk.app.cli",
    "sdk.demo": "sdk.app.demo",
    "sdk.display": "sdk.app.display",
    "sdk.template": "sdk.app.template",
    "sdk.spark.arrow": "sdk.spark.executor.batches",
    "sdk.spark.headstart": "sdk.spark.startup.headstart",
    "sdk.spark.headworkers": "sdk.spark.startup.headworkers",
    "sdk.spark.warmup": "sdk.spark.startup.warmup",
    "sdk.spark.workers": "sdk.spark.startup.workers",
    "sdk.spark.jvmcache": "sdk.spark.startup.jvmcache",
    "sdk.spark.source": "sdk.spark.driver.source",
    "sdk.spark.requests": "sdk.spark.driver.requests",
    "sdk.spark.reads": "sdk.spark.executor.reads",
    "sdk.spark.mirror": "sdk.spark.executor.mirror",
    "sdk.spark.deadletter": "sdk.spark.executor.deadletter",
    "sdk.spark.envelope": "sdk.spark.executor.envelope",
    "sdk.spark.batches": "sdk.spark.executor.batches",
    "sdk.spark.collector": "sdk.spark.executor.collector",
    "sdk.spark.engine_state": "sdk.spark.state.engine_state",
    "sdk.spark.checkpoint_format": "sdk.spark.state.checkpoint_format",
    "sdk.spark.handoff": "sdk.spark.state.handoff",
    "sdk.spark.statestore": "sdk.spark.state.statestore",
    "sdk.spark.lease": "sdk.spark.state.lease",
}
"""Old module path -> where the module lives now."""


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new one (the same object, so classes and
    pluggy's markers are shared)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}: import it from there (or the names "
                      "a dialect needs from sdk itself); the old path goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is loaded already."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Answer imports of the old paths (once per interpreter)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
