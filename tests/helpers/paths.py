"""Where the repository is, for tests that read its docs or examples."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
