"""The kit's TestFaults tells a refused login from a server that does not answer, shown on
PostgreSQL (SQLite has no login to refuse): a copy of the dialect that calls every failure to
connect a passing fault (every OperationalError retried, as the worked example once did) fails
the refused-login test, and the dialect itself passes the whole group."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres

KIT_MODULE = '''
import pytest
import sdk_postgres
from helpers.harnesses import PostgresHarness
from helpers.sqlite_mutants import mutant_of
from sdk import ConfigurationError, RetriableError
from sdk.testing.suite import TestFaults  # noqa: F401


def connect_retrying_every_failure(config):
    try:
        return sdk_postgres.connect(config)
    except ConfigurationError as exc:  # a refused login too: retried for ever
        raise RetriableError(str(exc)) from None


class FaultsHarness(PostgresHarness):
    plugin = mutant_of(sdk_postgres, "retries_every_failure",
                       connect=connect_retrying_every_failure) if {mutant} else None


@pytest.fixture(scope="session")
def harness():
    return FaultsHarness({url!r}, {admin_url!r}, "sdk_kit_unused")
'''


def run_faults(pytester: pytest.Pytester, url: str, admin_url: str, mutant: bool
               ) -> dict[str, str]:
    pytester.makepyfile(test_kit=KIT_MODULE.format(url=url, admin_url=admin_url,
                                                   mutant=mutant))
    result = pytester.inline_run("-p", "no:cacheprovider", "-q")
    passed, skipped, failed = result.listoutcomes()
    return {r.nodeid.split("::")[-1]: outcome for outcome, reports in
            (("passed", passed), ("skipped", skipped), ("failed", failed)) for r in reports}


def test_a_dialect_retrying_a_refused_login_fails_the_kit(
        pytester: pytest.Pytester, postgres_url: str, postgres_admin_url: str) -> None:
    outcomes = run_faults(pytester, postgres_url, postgres_admin_url, mutant=True)
    assert outcomes["test_a_refused_login_is_a_configuration_error"] == "failed", outcomes
    assert outcomes["test_a_server_that_does_not_answer_is_retriable"] == "passed", outcomes


def test_the_dialect_passes_the_faults_group(
        pytester: pytest.Pytester, postgres_url: str, postgres_admin_url: str) -> None:
    outcomes = run_faults(pytester, postgres_url, postgres_admin_url, mutant=False)
    assert set(outcomes.values()) == {"passed"} and len(outcomes) == 4, outcomes
