"""CI runs what the README tells a newcomer to run: its set-up commands as written, in order,
then its test command, with nothing before the tests that installs, exports or prepares more
(a step only CI runs hides the gap a newcomer meets)."""

from __future__ import annotations

import re

from helpers.paths import ROOT

# what may precede the README's commands in .ci/run: making and entering a fresh virtualenv
FRESH_VENV = re.compile(r"(set -euo pipefail|cd .*|VENV=.*|rm -rf \"\$VENV\"|"
                        r"python3 -m venv \"\$VENV\"|\. \"\$VENV/bin/activate\")")


def readme_test_commands(readme: str) -> tuple[list[str], str]:
    """The README's set-up commands and its test command: the ``sh`` blocks of the paragraph
    that starts "Run the tests", the set-up first and the test command last."""
    start = readme.index("Run the tests")
    section = readme[start:readme.index("\n## ", start)]
    blocks = [[line.strip() for line in block.splitlines() if line.strip()]
              for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]
    assert len(blocks) == 2 and len(blocks[1]) == 1, blocks
    return blocks[0], blocks[1][0]


def steps_before(script: str, test: str) -> list[str]:
    """The commands a shell script runs before ``test``, less those making a fresh virtualenv
    (one a line; comments and blank lines left out)."""
    commands = [line.strip() for line in script.splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert test in commands, f".ci/run does not run the README's test command {test!r}"
    return [c for c in commands[:commands.index(test)] if not FRESH_VENV.fullmatch(c)]


def test_ci_runs_the_readme_set_up_then_its_test_command_and_nothing_else_first() -> None:
    setup, test = readme_test_commands((ROOT / "README.md").read_text())
    steps = steps_before((ROOT / ".ci" / "run").read_text(), test)
    assert steps == setup, ("before its tests .ci/run must run the README's set-up as "
                            f"written, and only that: {steps} against {setup}")


def test_the_readme_set_up_installs_the_example_the_suite_runs() -> None:
    setup, _ = readme_test_commands((ROOT / "README.md").read_text())
    installs = " ".join(c for c in setup if c.startswith("pip install"))
    assert "./examples/sdk-pgtrigger" in installs and "[all,test]" in installs, setup


def test_the_readme_reader_finds_commands_and_rejects_an_extra_step() -> None:
    readme = ("Run the tests:\n\n```sh\npip install x\neval y\n```\n\nthen:\n\n```sh\n"
              "python -m pytest\n```\n\n## Next\n")
    assert readme_test_commands(readme) == (["pip install x", "eval y"], "python -m pytest")
    script = "set -euo pipefail\n. \"$VENV/bin/activate\"\npip install x\neval y\n"
    assert steps_before(script + "python -m pytest\n", "python -m pytest") == [
        "pip install x", "eval y"]
    extra = script + "export PYTHONPATH=examples\npython -m pytest\n"
    assert steps_before(extra, "python -m pytest")[-1] == "export PYTHONPATH=examples"
