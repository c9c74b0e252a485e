"""Options: Flink CDC / SeaTunnel names, typed parsing, and errors that say what to fix."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

from sdk import ConfigurationError, ConnectionConfig
from sdk.algorithm import StartupMode, SyncOptions
from sdk.dialect import options as options_module
from sdk.dialect.manager import check_url_options, default_manager
from sdk.job.spec import (
    READER_OPTIONS,
    SYNC_OPTIONS,
    SyncSettings,
    parse_options,
    resolve,
    sync_settings,
)

DOCS = ROOT / "docs"


def test_defaults_match_the_peers() -> None:
    options = SyncOptions()
    assert options.split_size == 32768 and options.exactly_once
    assert options.startup_mode is StartupMode.INITIAL


def test_parses_known_options_case_insensitively() -> None:
    options = SyncOptions.from_strings({
        "snapshot.split.size": "100", "EXACTLY-ONCE": "false", "startup.mode": "Latest",
        "chunk-key.column": "shop.orders:region,id; users:email",
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
    ("snapshot.split.size", "ten", "snapshot.split.size': takes a whole number, not 'ten'"),
    ("exactly-once", "maybe", "true or false"),
    ("startup.mode", "beginning", "initial, snapshot, latest"),
    ("chunk-key.column", "orders", "TABLE:COL"),
    ("startup.specific-offset", "[1]", "offset's JSON"),
])
def test_bad_values_name_the_option(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SyncOptions.from_strings({name: value})


def test_flink_cdc_names_are_accepted_as_aliases() -> None:
    options = SyncOptions.from_strings({"scan.incremental.snapshot.chunk.size": "64",
                                        "scan.startup.mode": "latest-offset",
                                        "Scan.Snapshot.Fetch.Size": "32"})
    assert (options.split_size, options.fetch_size) == (64, 32)
    assert options.startup_mode is StartupMode.LATEST
    with pytest.raises(ConfigurationError, match="given twice"):
        SyncOptions.from_strings({"snapshot.split.size": "1",
                                  "scan.incremental.snapshot.chunk.size": "2"})


@pytest.mark.parametrize("name, error", [
    ("heartbeat.interval.ms", r"unknown option 'heartbeat.interval.ms'$"),  # was accepted
    ("path", r"unknown option 'path'"),  # was accepted
    ("paralellism", r"unknown option 'paralellism'; did you mean 'parallelism'\?"),
    ("snapshot.splits-per-bach", r"did you mean 'snapshot.splits-per-batch'\?"),
    ("statedir", None),  # names are case-insensitive: known
])
def test_every_reader_option_is_known_or_an_error(name: str, error: str | None) -> None:
    options = {"url": "sqlite:///x.db", name: "1"}
    if error is None:
        parse_options(options)
        return
    with pytest.raises(ConfigurationError, match=error):
        parse_options(options)
    with pytest.raises(ConfigurationError, match=error):
        sync_settings({"source": "sqlite:///x.db"}, {name: "1"})


def test_a_bad_option_fails_before_the_source_is_touched(tmp_path: Path) -> None:
    db = tmp_path / "shop.db"
    sqlite3.connect(db).execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    before = sqlite3.connect(db).execute("SELECT count(*) FROM sqlite_master").fetchone()
    for bad in ({"parallelism": "abc"}, {"snapshot.splits-per-batch": "0"},
                {"envelope": "perhaps"}, {"log.poll-interval.ms": "-1"}):
        with pytest.raises(ConfigurationError, match=next(iter(bad))):
            resolve({"url": f"sqlite:///{db}", **bad})
    after = sqlite3.connect(db).execute("SELECT count(*) FROM sqlite_master").fetchone()
    assert before == after  # no change table, no trigger: capture was never prepared


def test_source_settings_parse_to_their_types() -> None:
    parsed = parse_options({"URL": "sqlite:///x.db", "parallelism": "3", "envelope": "TRUE",
                            "log.poll-interval.ms": "250"})
    assert parsed.source["parallelism"] == 3 and parsed.source["envelope"] is True
    assert parsed.source["head_poll_seconds"] == 0.25 and parsed.tables == "*"
    settings = sync_settings({"source": "x", "retry.seconds": "0", "target": None}, {})
    assert settings.retry_seconds == 0.0 and settings.target == "sqlite:///sdk-mirror.db"
    assert sync_settings({"source": "x", "target": "none"}, {}).target is None


def test_the_sync_settings_are_the_declared_ones() -> None:
    """One field per ``sdk sync`` setting (and the reader's options), defaulting as declared:
    what ``run_sync`` takes."""
    fields = {f.name: f for f in dataclasses.fields(SyncSettings)}
    assert set(fields) == {o.attr for o in SYNC_OPTIONS} | {"options"}
    for option in SYNC_OPTIONS:
        if option.attr != "source":  # required
            assert fields[option.attr].default == option.default, option.name
    assert SyncSettings("x") == sync_settings({"source": "x"}, {})


def test_option_names_are_in_one_style() -> None:
    """Dotted, lower case, words joined by '-' within a part (as Flink CDC's); the names
    before that style are former names."""
    for option in [*READER_OPTIONS, *SYNC_OPTIONS]:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*(\.[a-z0-9]+(-[a-z0-9]+)*)*",
                            option.name), option.name


@pytest.fixture
def warned_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each former name warns once a process: as if none had been given yet."""
    monkeypatch.setattr(options_module, "_WARNED", set())


@pytest.mark.parametrize("old, new, value, attr", [
    ("stateDir", "state.dir", "/tmp/st", "state_dir"),
    ("targetSchema", "target.schema", "mirror", "target_schema"),
])
def test_a_former_source_option_name_works_and_warns_once(
        old: str, new: str, value: str, attr: str, warned_afresh: None,
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="sdk.dialect.options"):
        for _ in range(2):
            parsed = parse_options({"url": "sqlite:///x.db", old: value})
            assert parsed.source[attr] == value
    assert caplog.text.count(f"option {old!r} is deprecated: it is called {new!r} now") == 1
    with pytest.raises(ConfigurationError, match="given twice"):
        parse_options({"url": "sqlite:///x.db", old: value, new: value})


def test_the_former_exactly_once_name_works_and_warns(
        warned_afresh: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="sdk.dialect.options"):
        assert not SyncOptions.from_strings({"exactly_once": "false"}).exactly_once
    assert "'exactly_once' is deprecated: it is called 'exactly-once' now" in caplog.text


def test_flink_names_stay_silent(warned_afresh: None,
                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="sdk.dialect.options"):
        SyncOptions.from_strings({"scan.incremental.snapshot.chunk.size": "64"})
    assert "deprecated" not in caplog.text


@pytest.mark.parametrize("old, new, value, attr", [
    ("target_schema", "target.schema", "mirror", "target_schema"),
    ("retry_seconds", "retry.seconds", "5", "retry_seconds"),
    ("metrics_port", "metrics.port", "9464", "metrics_port"),
])
def test_a_former_sync_key_works_and_warns(old: str, new: str, value: str, attr: str,
                                           warned_afresh: None,
                                           caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="sdk.dialect.options"):
        settings = sync_settings({"source": "x", old: value}, {})
    assert str(getattr(settings, attr)) in (value, f"{value}.0")
    assert f"option {old!r} is deprecated: it is called {new!r} now" in caplog.text


def test_a_former_yaml_key_meets_its_flag(tmp_path: Path, warned_afresh: None,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """``target_schema:`` in the YAML and ``--target-schema`` on the command line are one
    setting, the flag winning (not an error that it is given twice)."""
    from sdk.app.cli import _sync_settings, build_parser

    config = tmp_path / "sync.yaml"
    config.write_text("source: sqlite:///x.db\ntarget_schema: from_yaml\nretry_seconds: 7\n")
    args = build_parser().parse_args(["sync", "--config", str(config),
                                      "--target-schema", "from_flag"])
    with caplog.at_level("WARNING", logger="sdk.dialect.options"):
        settings = _sync_settings(args)
    assert (settings.target_schema, settings.retry_seconds) == ("from_flag", 7.0)
    assert "it is called 'target.schema' now" in caplog.text


def test_the_docs_carry_the_declared_options() -> None:
    text = (DOCS / "spark.md").read_text()
    assert READER_OPTIONS.markdown() in text
    assert SYNC_OPTIONS.markdown() in text
    readme = " ".join((DOCS.parent / "README.md").read_text().split())
    keys = readme[readme.index("sdk sync --config sync.yaml` (keys"):].split(";")[0]
    assert sorted(k for k in keys.split("`")[2::2]) == sorted(
        [o.name for o in SYNC_OPTIONS] + ["options"])


def test_sdk_status_reads_its_report_without_pyspark(tmp_path: Path) -> None:
    state = tmp_path / "ck" / "state"
    state.mkdir(parents=True)
    (state / "progress.json").write_text('{"phase": "log", "tables": {}, "rows": 3}')
    code = ("import sys; from sdk.app.cli import main; rc = main(['status', '--checkpoint', "
            f"{str(tmp_path / 'ck')!r}]); assert 'pyspark' not in sys.modules, 'imported'; "
            "sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "phase log, 3 rows" in done.stdout


def test_a_misspelt_url_option_names_the_closest_the_dialect_reads(tmp_path: Path) -> None:
    manager = default_manager()
    with pytest.raises(ConfigurationError, match=r"sqlite URL: unknown option 'mode'"):
        manager.dialect_for_url(f"sqlite:///{tmp_path}/x.db?mode=ro")
    for url, typo, closest in [("postgresql://u@h/db?slto=a", "slto", "slot"),
                               ("mysql://u@h/db?read_timout=3", "read_timout", "read_timeout"),
                               ("sqlserver://u@h/db?exact_tme=1", "exact_tme", "exact_time")]:
        scheme = url.split(":")[0]
        info = manager.get_info({"postgresql": "postgres", "mysql": "mysql",
                                 "sqlserver": "sqlserver"}[scheme])
        with pytest.raises(ConfigurationError, match=f"unknown option '{typo}'; did you mean "
                                                     f"'{closest}'"):
            check_url_options(info, ConnectionConfig.from_url(url))
    check_url_options(manager.get_info("postgres"), ConnectionConfig.from_url(
        "postgresql://u@h/db?slot=a&keepalives_idle=5&password_env=HOME"))


@pytest.mark.parametrize("name", ["sqlite", "mysql", "postgres", "oracle", "sqlserver"])
def test_each_dialect_declares_its_url_options_and_documents_them(name: str) -> None:
    info = default_manager().get_info(name)
    assert info.url_options is not None
    text = (DOCS / "dialects" / f"{name}.md").read_text()
    missing = [option for option, _ in info.url_options if option not in text]
    assert not missing, f"docs/dialects/{name}.md does not mention {missing}"
