"""Prometheus text read back into figures."""

from __future__ import annotations


def samples(text: str) -> dict[str, float]:
    """The sample lines of exposition text: ``name{labels}`` -> value."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
