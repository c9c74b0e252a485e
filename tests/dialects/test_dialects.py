"""Plugin loading: discovery, validation at load, dispatch to one dialect, clear misses."""

from __future__ import annotations

import pickle
import types
from collections.abc import Iterator
from typing import Any

import pytest

from sdk import (
    Capability,
    DialectInfo,
    DialectManager,
    DialectNotFoundError,
    DriverMissingError,
    Offset,
    PluginValidationError,
    TableStats,
    get_dialect,
    hookimpl,
)
from sdk.dialect.hookspecs import CAPABILITY_HOOKS, REQUIRED_HOOKS


def make_plugin(name: str, drivers: tuple[str, ...] = (), extra: str | None = None,
                skip: tuple[str, ...] = (), declared: frozenset[Capability] = frozenset(),
                **extra_hooks: Any) -> types.SimpleNamespace:
    """A plugin object implementing every required hook trivially (for loading tests only)."""
    def info() -> DialectInfo:
        return DialectInfo(name=name, title=name, drivers=drivers, extra=extra,
                           capabilities=declared)

    def compare(a: Offset, b: Offset) -> int:
        return 0

    def anything(*args: Any) -> Iterator[Any]:
        yield from ()

    hooks: dict[str, Any] = {hook: anything for hook in REQUIRED_HOOKS}
    hooks.update(dialect_info=info, compare_offset=compare, **extra_hooks)
    return types.SimpleNamespace(**{k: hookimpl(v) for k, v in hooks.items() if k not in skip})


def test_builtin_reference_dialect_loads_from_entry_point() -> None:
    manager = DialectManager()
    assert "sqlite" in manager.names
    sqlite = manager.get("sqlite")
    assert sqlite.info.name == "sqlite" and sqlite.implements("apply_changes")


def test_a_url_loads_the_plugin_named_like_its_scheme_alone() -> None:
    """A URL whose scheme names a dialect (aliases resolved) loads that plugin alone, as each
    Spark worker resolving a sync's URLs does; a scheme no dialect is named like looks among
    all of them."""
    def loaded(manager: DialectManager) -> set[str]:
        return {name for name, _ in manager.pm.list_name_plugin()}

    manager = DialectManager()
    assert manager.dialect_for_url("postgresql://u@h/db")[0].name == "postgres"
    assert loaded(manager) == {"postgres"}
    assert manager.dialect_for_url("delta+file:///tmp/x")[0].name == "delta"
    assert loaded(manager) == {"postgres", "delta"}
    assert manager.get_info("oracle").name == "oracle"  # loaded when asked for
    with pytest.raises(DialectNotFoundError, match=r"installed: .*sqlite"):
        manager.dialect_for_url("nosuch://u@h/db")
    assert {"sqlite", "mysql"} <= loaded(manager)


def test_dispatch_reaches_only_the_chosen_dialect() -> None:
    calls: list[str] = []

    def current_offset_a() -> Offset:
        calls.append("a")
        return Offset("a", n=1)

    def current_offset_b() -> Offset:
        calls.append("b")
        return Offset("b", n=2)

    manager = DialectManager(load_entry_points=False)
    manager.register(make_plugin("a", current_offset=current_offset_a), "a")
    manager.register(make_plugin("b", current_offset=current_offset_b), "b")
    assert manager.get("b").current_offset(conn=None) == Offset("b", n=2)  # type: ignore[arg-type]
    assert calls == ["b"]


def test_missing_required_hook_is_refused_at_load() -> None:
    manager = DialectManager(load_entry_points=False)
    with pytest.raises(PluginValidationError, match=r"lacks required hook.*stream_log"):
        manager.register(make_plugin("x", skip=("stream_log",)), "x")
    assert "x" not in manager.names


def test_misspelt_hook_is_refused_at_load() -> None:
    manager = DialectManager(load_entry_points=False)
    with pytest.raises(PluginValidationError, match="curent_offset"):
        manager.register(make_plugin("x", curent_offset=lambda: None), "x")


def test_name_must_match_entry_point() -> None:
    manager = DialectManager(load_entry_points=False)
    with pytest.raises(PluginValidationError, match="says its name is 'y'"):
        manager.register(make_plugin("y"), "x")


def test_unknown_dialect_names_installed_and_extra() -> None:
    manager = DialectManager(load_entry_points=False)
    manager.register(make_plugin("a"), "a")
    with pytest.raises(DialectNotFoundError) as info:
        manager.get("oracle")
    assert "installed: a" in str(info.value)
    assert "pip install 'sdk[oracle]'" in str(info.value)
    with pytest.raises(DialectNotFoundError, match="entry-point group"):
        manager.get("nosuchdb")


def test_missing_driver_names_the_extra_and_is_listed() -> None:
    manager = DialectManager(load_entry_points=False)
    plugin = make_plugin("oracle", drivers=("no_such_driver_module",), extra="oracle")
    manager.register(plugin, "oracle")
    with pytest.raises(DriverMissingError, match=r"pip install 'sdk\[oracle\]'"):
        manager.get("oracle")
    (status,) = [s for s in manager.statuses() if s.name == "oracle"]
    assert not status.usable
    assert status.problem == "driver missing: pip install 'sdk[oracle]'"


def test_threads_looking_up_dialects_while_they_load_each_find_theirs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread lists the dialects (loading every plugin) while others ask for one each (a
    driver's callback threads): each finds its dialect, none is loaded twice or called
    broken. The installed entry points are used, each load slowed to widen the window."""
    import importlib.metadata
    import threading
    import time

    import sdk.dialect.manager as manager_module

    class Slow:
        def __init__(self, ep: importlib.metadata.EntryPoint) -> None:
            self.name, self.value, self._ep = ep.name, ep.value, ep

        def load(self) -> Any:
            time.sleep(0.05)
            return self._ep.load()

    installed = list(importlib.metadata.entry_points(group=manager_module.ENTRY_POINT_GROUP))
    monkeypatch.setattr(manager_module, "entry_points",
                        lambda group: [Slow(ep) for ep in installed if ep.group == group])
    manager = DialectManager()
    wanted = ["sqlite", "postgres", "mysql"]
    found: dict[str, str] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(len(wanted) + 1)

    def lookup(name: str | None) -> None:
        start.wait()
        try:
            if name is None:
                assert "sqlite" in manager.names  # loads them all
            else:
                found[name] = manager.get(name).name
        except BaseException as exc:  # told to the test thread
            failures.append(exc)

    threads = [threading.Thread(target=lookup, args=(name,)) for name in [None, *wanted]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert found == {name: name for name in wanted}
    assert all(s.usable for s in manager.statuses() if s.name in wanted)


def test_disabled_plugins_are_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDK_DISABLE_PLUGINS", "sqlite")
    assert "sqlite" not in DialectManager().names


def test_hook_tracing_logs_calls(monkeypatch: pytest.MonkeyPatch,
                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("SDK_TRACE_HOOKS", "1")
    manager = DialectManager(load_entry_points=False)
    manager.register(make_plugin("a"), "a")
    with caplog.at_level("INFO", logger="sdk.hooks"):
        assert manager.get("a").compare_offset(Offset("a", n=1), Offset("a", n=2)) == 0
    assert "a.compare_offset(" in caplog.text


def test_dialect_pickles_by_name() -> None:
    dialect = get_dialect("sqlite")
    assert pickle.loads(pickle.dumps(dialect)) is dialect


def test_url_scheme_selects_dialect() -> None:
    dialect, config = DialectManager().dialect_for_url("sqlite:///x.db")
    assert dialect.name == "sqlite" and config.database == "x.db"


def _nothing(*args: Any) -> None:
    return None


def test_capabilities_follow_from_the_hooks_implemented() -> None:
    manager = DialectManager(load_entry_points=False)
    manager.register(make_plugin("a", earliest_offset=_nothing, create_table=_nothing,
                                 apply_changes=_nothing), "a")
    dialect = manager.get("a")
    assert dialect.info.capabilities == {Capability.EARLIEST, Capability.APPLY}
    assert manager.get_info("a").capabilities == dialect.info.capabilities  # sdk dialects
    assert not dialect.has(Capability.TIMESTAMP)


def test_declared_capabilities_are_merged_with_the_inferred() -> None:
    """Older plugins declare what their hooks show; before images only a declaration shows."""
    manager = DialectManager(load_entry_points=False)
    declared = frozenset({Capability.BEFORE_IMAGES, Capability.EARLIEST})
    manager.register(make_plugin("a", declared=declared, earliest_offset=_nothing,
                                 acknowledge_offset=_nothing), "a")
    assert manager.get("a").info.capabilities == declared | {Capability.ACKNOWLEDGE}


@pytest.mark.parametrize("capability", [c for c, hooks in CAPABILITY_HOOKS.items()
                                        if len(hooks) > 1])
def test_half_a_capability_is_refused_at_load_naming_the_missing_hook(capability: Capability
                                                                      ) -> None:
    first, *rest = CAPABILITY_HOOKS[capability]
    manager = DialectManager(load_entry_points=False)
    with pytest.raises(PluginValidationError, match=f"lacks {', '.join(rest)}: capability "
                                                    f"{capability.value}"):
        manager.register(make_plugin("x", **{first: _nothing}), "x")
    assert "x" not in manager.names


def test_table_stats_is_optional_and_defaults_to_none() -> None:
    """Without statistics the planner cuts every table by index seeks: always correct."""
    manager = DialectManager(load_entry_points=False)
    manager.register(make_plugin("a", skip=("table_stats",)), "a")
    assert "table_stats" not in REQUIRED_HOOKS
    dialect = manager.get("a")
    assert dialect.table_stats(None, None) == TableStats(None, None, 0)  # type: ignore[arg-type]


BUILTIN_CAPABILITIES = {
    "sqlite": {"atomic_snapshot", "before_images", "apply", "acknowledge", "earliest",
               "filtered_reads", "alter", "bulk_load", "transactions"},
    "mysql": {"atomic_snapshot", "before_images", "earliest", "apply", "filtered_reads",
              "alter", "schema_changes", "arrow_reads", "bulk_load", "checksum", "transactions"},
    "postgres": {"acknowledge", "earliest", "apply", "atomic_snapshot", "filtered_reads",
                 "alter", "schema_changes", "bulk_load", "arrow_reads", "checksum",
                 "transactions"},
    "oracle": {"atomic_snapshot", "earliest"},
    "sqlserver": {"before_images", "earliest", "timestamp"},
}


@pytest.mark.parametrize("name", sorted(BUILTIN_CAPABILITIES))
def test_builtin_dialects_keep_their_capabilities(name: str) -> None:
    """Inferred from the hooks, they are what each dialect used to declare."""
    manager = DialectManager()
    if name not in manager.names:
        pytest.skip(f"dialect {name} is not installed")
    assert manager.get_info(name).capabilities == BUILTIN_CAPABILITIES[name]
