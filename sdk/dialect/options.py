"""Options declared once: each layer's options as a typed table, from which parsing,
validation, suggestions for typos, ``--help`` and the documentation tables are derived.

A layer is whoever reads the option: the algorithm (:class:`sdk.algorithm.SyncOptions`), the
source (the Spark ``cdc`` reader: URL, tables, state directory, batch sizes) or the sync job
(``sdk sync`` flags and YAML keys). Options arrive as strings (Spark's ``.option(k, v)``, the
CLI's ``--option k=v``, YAML); names are case-insensitive, and where an option means what a
Flink CDC option means, Flink CDC's name is accepted too.

Names are in one style, Flink CDC's: dotted, lower case, words joined by ``-`` within a part
(``snapshot.split.size``, ``chunk-key.column``, ``log.poll-interval.ms``). A name an option had
before it was renamed into that style still works, with one warning naming the new one.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Option:
    """One option: its name, the attribute it sets, how its text is parsed and checked, its
    default (``None``: unset) and what it does."""

    name: str
    attr: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    layer: str
    aliases: tuple[str, ...] = ()
    """Other accepted names, e.g. Flink CDC's for the same setting."""
    shown_default: str | None = None
    """The default as the docs say it, where the value itself says little ("all")."""
    deprecated: tuple[str, ...] = ()
    """Former names, still accepted with a warning naming :attr:`name` (unlike
    :attr:`aliases`, which are accepted silently)."""

    @property
    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return "-" if self.default is None else str(self.default)


class OptionTable:
    """The options of one or more layers, looked up by name or alias, case-insensitively."""

    def __init__(self, *options: Option) -> None:
        self.options = options
        self._by_name: dict[str, Option] = {}
        self._deprecated: set[str] = set()
        for option in options:
            for name in (option.name, *option.aliases, *option.deprecated):
                if name.lower() in self._by_name:
                    raise ValueError(f"option {name!r} declared twice")
                self._by_name[name.lower()] = option
            self._deprecated.update(name.lower() for name in option.deprecated)

    def __add__(self, other: OptionTable) -> OptionTable:
        return OptionTable(*self.options, *other.options)

    def __iter__(self) -> Any:
        return iter(self.options)

    def find(self, name: str) -> Option | None:
        """The option ``name`` names (its name, an alias, or a former name, which warns)."""
        option = self._by_name.get(name.lower())
        if option is not None and name.lower() in self._deprecated:
            _warn_deprecated(name, option.name)
        return option

    def canonical(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` under their options' names (unknown names kept as given), so that two
        spellings of one option given in two places meet as one key."""
        out: dict[str, Any] = {}
        for name, value in values.items():
            option = self.find(name)
            out[option.name if option is not None else name] = value
        return out

    def unknown(self, name: str) -> ConfigurationError:
        """The error for an option nobody reads, naming the closest known one."""
        close = difflib.get_close_matches(name.lower(), list(self._by_name), n=1)
        hint = f"; did you mean {self._by_name[close[0]].name!r}?" if close else ""
        return ConfigurationError(f"unknown option {name!r}{hint}")

    def check_names(self, names: Iterable[str]) -> None:
        """Raise for the first name no option of this table has."""
        for name in names:
            if self.find(name) is None:
                raise self.unknown(name)

    def parse(self, values: Mapping[str, str], layer: str | None = None) -> dict[str, Any]:
        """``{attr: value}`` for the given options of ``layer`` (all layers when None).
        Unknown names and bad values raise :class:`ConfigurationError` naming the option;
        options of other layers are left to them."""
        out: dict[str, Any] = {}
        given: dict[str, str] = {}
        for raw_name, raw in values.items():
            option = self.find(raw_name)
            if option is None:
                raise self.unknown(raw_name)
            if layer is not None and option.layer != layer:
                continue
            if option.attr in out:
                raise ConfigurationError(f"option {option.name!r} given twice (as "
                                         f"{given[option.attr]!r} and {raw_name!r})")
            try:
                out[option.attr] = option.parse(raw)
            except (ValueError, TypeError) as exc:
                text = str(exc)
                if text.startswith("invalid literal for int()"):
                    text = f"takes a whole number, not {raw!r}"
                elif text.startswith("could not convert string to float"):
                    text = f"takes a number, not {raw!r}"
                raise ConfigurationError(f"option {option.name!r}: {text}") from None
            given[option.attr] = raw_name
        return out

    def defaults(self, layer: str | None = None) -> dict[str, Any]:
        return {o.attr: o.default for o in self.options if layer in (None, o.layer)}

    def markdown(self, layer: str | None = None) -> str:
        """A Markdown table of the options (for the docs, which a test keeps equal)."""
        lines = ["| option | default | meaning |", "| --- | --- | --- |"]
        for o in self.options:
            if layer not in (None, o.layer):
                continue
            name = f"`{o.name}`" + "".join(f" (`{a}`)" for a in o.aliases)
            if o.deprecated:
                name += " (was " + ", ".join(f"`{d}`" for d in o.deprecated) + ")"
            lines.append(f"| {name} | {o.default_text} | {o.help} |")
        return "\n".join(lines) + "\n"


_WARNED: set[str] = set()
"""The former names warned about so far in this process (each is warned about once)."""


def _warn_deprecated(name: str, new: str) -> None:
    if name.lower() in _WARNED:
        return
    _WARNED.add(name.lower())
    log.warning("option %r is deprecated: it is called %r now (the old name stops working in "
                "a future release)", name, new)


# --- value parsers -------------------------------------------------------------------------


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"must be a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(f"must be a positive number, got {text!r}")
    return value


def boolean(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def text(value: str) -> str:
    return str(value)


def choice(*choices: str, aliases: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """A parser accepting one of ``choices`` (or an alias of one), case-insensitively."""
    def parse(value: str) -> str:
        lowered = str(value).strip().lower()
        lowered = (aliases or {}).get(lowered, lowered)
        if lowered not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {value!r}")
        return lowered
    return parse
