"""Database URLs: parsing, dialect selection, and never showing a password."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk import ConfigurationError, ConnectionConfig
from sdk.dialect.config import mask_url


def test_parses_a_server_url() -> None:
    config = ConnectionConfig.from_url("mariadb://cdc:s%40cret@db.local:3307/shop?ssl=true")
    assert (config.dialect, config.host, config.port, config.user, config.database) == \
        ("mysql", "db.local", 3307, "cdc", "shop")
    assert config.password == "s@cret"
    assert config.options == {"ssl": "true"}


@pytest.mark.parametrize("url, dialect", [
    ("postgresql://u@h/db", "postgres"), ("postgres://u@h/db", "postgres"),
    ("mysql+pymysql://u@h/db", "mysql"), ("mssql://u@h/db", "sqlserver"),
    ("sqlserver://u@h/db", "sqlserver"), ("oracle://u@h/FREEPDB1", "oracle"),
])
def test_scheme_selects_dialect(url: str, dialect: str) -> None:
    assert ConnectionConfig.from_url(url).dialect == dialect


def test_sqlite_paths() -> None:
    assert ConnectionConfig.from_url("sqlite:///rel/x.db").database == "rel/x.db"
    assert ConnectionConfig.from_url("sqlite:////abs/x.db").database == "/abs/x.db"


def test_password_never_shown() -> None:
    config = ConnectionConfig.from_url("postgresql://cdc:hunter2@h:5432/db")
    for text in (repr(config), str(config), config.masked_url):
        assert "hunter2" not in text
    assert config.masked_url == "postgres://cdc:***@h:5432/db"
    assert mask_url("mysql://u:hunter2@h/db") == "mysql://u:***@h/db"


def test_password_from_env_and_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DB_PW", "from-env")
    config = ConnectionConfig.from_url("mysql://u@h/db?password_env=DB_PW&ssl=1")
    assert config.password == "from-env" and config.options == {"ssl": "1"}
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    url = f"mysql://u@h/db?password_file={secret}"
    assert ConnectionConfig.from_url(url).password == "from-file"
    with pytest.raises(ConfigurationError, match="NOT_SET"):
        ConnectionConfig.from_url("mysql://u@h/db?password_env=NOT_SET")


@pytest.mark.parametrize("url", ["localhost:3306/db", "mysql://u:pw@h:notaport/db"])
def test_bad_urls_are_configuration_errors_without_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ConnectionConfig.from_url(url)
    assert ":pw@" not in str(info.value)


def test_secret_options_come_from_the_environment_or_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEY_PW", "from-env")
    (tmp_path / "pw").write_text("from-file\n")
    by_env = ConnectionConfig.from_url("postgresql://u@h/db?sslpassword_env=KEY_PW")
    assert by_env.options == {"sslpassword": "from-env"}
    by_file = ConnectionConfig.from_url(f"postgresql://u@h/db?sslpassword_file={tmp_path}/pw")
    assert by_file.options == {"sslpassword": "from-file"}
    assert "from-file" not in repr(by_file) and "sslpassword" in repr(by_file)
    kept = ConnectionConfig.from_url("postgresql://u@h/db?cache_file=/x&sslmode_env=Y")
    assert kept.options == {"cache_file": "/x", "sslmode_env": "Y"}  # not secrets: as given
    with pytest.raises(ConfigurationError, match="sslpassword_env names the environment "
                       "variable 'NOPE'"):
        ConnectionConfig.from_url("postgresql://u@h/db?sslpassword_env=NOPE")
    with pytest.raises(ConfigurationError, match="give sslpassword one way"):
        ConnectionConfig.from_url("postgresql://u@h/db?sslpassword=a&sslpassword_env=KEY_PW")


def test_a_url_may_name_several_hosts() -> None:
    config = ConnectionConfig.from_url("mysql://u:pw@db1,db2:3307,[::1]:9/shop?x=1")
    assert config.hosts == (("db1", None), ("db2", 3307), ("::1", 9))
    assert (config.host, config.port, config.database, config.password) == \
        ("db1", None, "shop", "pw")
    assert config.masked_url == "mysql://u:***@db1,db2:3307,[::1]:9/shop"
    assert config.with_host("db2", 3307).masked_url == "mysql://u:***@db2:3307/shop"
    assert ConnectionConfig.from_url("mysql://u@db1:3306/shop").hosts == ()
    with pytest.raises(ConfigurationError, match="bad database URL"):
        ConnectionConfig.from_url("mysql://u@db1,db2:x/shop")
