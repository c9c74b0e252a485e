"""Options: Flink CDC / SeaTunnel names, typed parsing, and errors that say what to fix."""

from __future__ import annotations

import pytest

from sdk import ConfigurationError
from sdk.algorithm import StartupMode, SyncOptions


def test_defaults_match_the_peers() -> None:
    options = SyncOptions()
    assert options.split_size == 8096 and options.exactly_once
    assert options.startup_mode is StartupMode.INITIAL


def test_parses_known_options_case_insensitively() -> None:
    options = SyncOptions.from_strings({
        "snapshot.split.size": "100", "EXACTLY_ONCE": "false", "startup.mode": "Latest",
        "chunk-key.column": "shop.orders:region,id; users:email", "url": "ignored",
        "startup.specific-offset": '{"dialect": "mysql", "position": {"pos": 4}}',
    })
    assert options.split_size == 100 and not options.exactly_once
    assert options.startup_mode is StartupMode.LATEST
    assert options.chunk_key == {"shop.orders": ("region", "id"), "users": ("email",)}
    assert options.specific_offset == {"dialect": "mysql", "position": {"pos": 4}}


def test_unknown_option_suggests_the_closest() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean 'snapshot.split.size'"):
        SyncOptions.from_strings({"snapshot.split.sise": "10"})


@pytest.mark.parametrize("name, value, message", [
    ("snapshot.split.size", "0", "positive integer"),
    ("snapshot.split.size", "ten", "snapshot.split.size"),
    ("exactly_once", "maybe", "true or false"),
    ("startup.mode", "beginning", "initial, snapshot, latest"),
    ("chunk-key.column", "orders", "TABLE:COL"),
    ("startup.specific-offset", "[1]", "offset's JSON"),
])
def test_bad_values_name_the_option(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SyncOptions.from_strings({name: value})
