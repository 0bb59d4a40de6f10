"""The plugin as a user meets it, run in a pytester sandbox: fixtures, marker validation, teardown checks."""

from __future__ import annotations

import shutil

import moto.server  # noqa: F401  # imported before pytester snapshots sys.modules: inline runs must not
import psycopg
import pytest
import vcr  # noqa: F401  # re-import yaml's C loader (moto and vcrpy both use it), which breaks it

from ._scenarios import CASSETTES, STRIPE_CREATE

pytest_plugins = ["pytester"]
PG_URL_ENV = "SAFE_EFFECTS_TEST_PG_URL"


@pytest.fixture(autouse=True)
def sandbox_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PostgreSQL unless a test asks; no hypothesis plugin, whose summary re-imports itself in every inline run."""
    monkeypatch.delenv(PG_URL_ENV, raising=False)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")


def test_the_fixtures_share_one_clock_and_a_fresh_sqlite_store(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from safe_effects import SQLiteStore

        def test_it(safe_ledger, safe_clock, safe_store_url, fake_stripe, tmp_path):
            assert safe_ledger.clock is safe_clock is fake_stripe.clock
            assert safe_store_url.startswith(f"sqlite:///{tmp_path}")
            assert isinstance(safe_ledger.store, SQLiteStore)

        def test_sendgrid_and_ses_fakes(fake_sendgrid, fake_ses):
            assert fake_sendgrid.url.startswith("http://127.0.0.1:")
            assert fake_ses.sends() == []
        """
    )
    pytester.runpytest("--strict-markers").assert_outcomes(passed=2)


def test_fake_ses_signs_with_fake_credentials_so_a_test_needs_no_aws_setup(
    pytester: pytest.Pytester, no_aws_credentials: None
) -> None:
    """A machine with no AWS credentials or region at all: the test below verifies its sender and sends
    through the wrapped client with nothing configured (boto3 raised NoCredentialsError before)."""
    pytester.makepyfile(
        """
        import boto3
        import ses_safe

        def test_send(fake_ses, safe_ledger):
            boto3.client("sesv2", endpoint_url=fake_ses.url).create_email_identity(EmailIdentity="s@example.com")
            client = ses_safe.client("sesv2", ledger=safe_ledger, endpoint_url=fake_ses.url, configuration_set="cs")
            client.send_email(
                IntentKey="signup:u_1:welcome:v1",
                FromEmailAddress="s@example.com",
                Destination={"ToAddresses": ["a@example.com"]},
                Content={"Simple": {"Subject": {"Data": "Hi"}, "Body": {"Text": {"Data": "Welcome."}}}},
            )
            assert len(fake_ses.sends()) == 1
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_the_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.safe_effects(*, store='auto'|'sqlite'|'postgres', *"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            'stor="sqlite"',
            "unknown safe_effects marker option(s) stor; valid: store, assert_all_fired, crash_at, cassette_dir",
        ),
        ('store="mysql"', "safe_effects marker: store must be one of auto, sqlite, postgres, not 'mysql'"),
        ('"sqlite"', "safe_effects marker takes keyword options only, got positional ('sqlite',)"),
        ('crash_at=["nowhere"]', "safe_effects marker: crash_at takes the executor's crash points (before_dispatch, *"),
        (
            'crash_at="after_dispatch"',
            "*not ('after_dispatch',); a provider-side point is a trap on a fake: safe_crash.at(...)",
        ),
        ('assert_all_fired="no"', "safe_effects marker: assert_all_fired must be True or False, not 'no'"),
        ("crash_at=None", "safe_effects marker: crash_at must be a crash point or a list of them, not None"),
        ("cassette_dir=123", "safe_effects marker: cassette_dir must be a str path, not 123"),
    ],
)
def test_a_bad_marker_option_errors_before_the_test_runs(pytester: pytest.Pytester, marker: str, message: str) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.safe_effects({marker})
        def test_it():
            raise AssertionError("never runs")
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*{message}*"])
    result.stdout.no_fnmatch_line("*never runs*")


def test_the_closest_marker_wins_option_by_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.safe_effects(store="sqlite", cassette_dir="recorded")

        @pytest.mark.safe_effects(assert_all_fired=False, cassette_dir="elsewhere")
        def test_it(safe_options):
            assert (safe_options.store, safe_options.assert_all_fired, safe_options.cassette_dir) == (
                "sqlite", False, "elsewhere"
            )
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


UNFIRED = """
import pytest
from safe_effects.testing import Fault

{marker}
def test_it(fake_stripe):
    fake_stripe.inject(Fault.status_code(503))
    {body}
"""


def test_a_fault_that_never_fired_fails_the_test_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(UNFIRED.format(marker="", body="pass"))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*1 fault(s) set up by this test never fired, or not as often as set up:",
            "*- fake_stripe: Fault(kind=<FaultKind.STATUS: 'status'>, status=503*",
            "*opt out with @pytest.mark.safe_effects(assert_all_fired=False)",
        ]
    )


def test_a_fault_set_to_fire_twice_that_fired_once_says_so_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, stripe
        from stripe_safe.testing import server_error_fault

        def test_it(fake_stripe):
            fake_stripe.inject(server_error_fault(times=2))
            client = stripe.StripeClient("sk_test_x", base_addresses={"api": fake_stripe.url}, max_network_retries=0)
            with pytest.raises(stripe.StripeError):
                client.v1.customers.create(params={"name": "a"}, options={"idempotency_key": "k"})
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*1 fault(s) set up by this test never fired, or not as often as set up:",
            "*- fake_stripe: Fault(kind=<FaultKind.STATUS: 'status'>, status=500*(fired 1 of 2 times)",
        ]
    )


def test_a_refusal_or_saved_failure_that_never_fired_fails_the_test_at_teardown(pytester: pytest.Pytester) -> None:
    """testing.md's own throttling recipe (`fake_ses.refuse_sends`) and Stripe's saved 500 were queued apart
    from the server's faults, out of the check's sight: a test whose code never sent still passed."""
    pytester.makepyfile(
        """
        def test_throttled(fake_ses):
            fake_ses.refuse_sends("ThrottlingException")

        def test_saved_500(fake_stripe):
            fake_stripe.fail_next_write(after_commit=True)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(["*- fake_ses: refuse_sends('ThrottlingException', status=400)"])
    result.stdout.fnmatch_lines(["*- fake_stripe: fail_next_write(after_commit=True)"])


def test_the_teardown_check_can_be_turned_off(pytester: pytest.Pytester) -> None:
    marker = "@pytest.mark.safe_effects(assert_all_fired=False)"
    pytester.makepyfile(UNFIRED.format(marker=marker, body="pass"))
    pytester.runpytest().assert_outcomes(passed=1)


def test_a_failing_test_is_not_buried_under_teardown_complaints(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(UNFIRED.format(marker="", body="assert False, 'the real failure'"))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the real failure*"])


@pytest.mark.parametrize(
    ("marker", "body", "outcome"),
    [
        ("", "pytest.skip('not on this platform')", {"skipped": 1}),
        ("@pytest.mark.xfail(reason='a known bug')", "assert False", {"xfailed": 1}),
    ],
    ids=["skip", "xfail"],
)
def test_a_test_that_ended_early_is_not_charged_with_its_unfired_faults(
    pytester: pytest.Pytester, marker: str, body: str, outcome: dict[str, int]
) -> None:
    pytester.makepyfile(UNFIRED.format(marker=marker, body=body))
    pytester.runpytest().assert_outcomes(**outcome)  # no teardown error, no second xfail


def test_an_unfired_cassette_fault_and_a_crash_trap_fail_at_teardown(pytester: pytest.Pytester) -> None:
    (pytester.path / "recorded").mkdir()
    shutil.copy(CASSETTES / STRIPE_CREATE, pytester.path / "recorded" / "charge.yaml")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.safe_effects(cassette_dir="recorded")
        def test_it(safe_cassette, safe_crash, fake_stripe):
            safe_crash.at(fake_stripe.server, "after_dispatch", pid=12345678)
            with safe_cassette("charge.yaml", faults={0: "429"}):
                pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*2 fault(s) set up by this test never fired, or not as often as set up:",
            "*- safe_crash: Trap(point=<CrashPoint.AFTER_DISPATCH: 'after_dispatch'>, *pid=12345678*",
            "*- cassette charge.yaml: interaction 0 (POST /v1/payment_intents): status",
        ]
    )


@pytest.mark.parametrize(
    ("ci", "outcome", "says"),
    [
        (None, {"skipped": 1}, f"*store='postgres' needs {PG_URL_ENV}*"),
        ("true", {"errors": 1}, f"*store='postgres' needs {PG_URL_ENV} (CI is set: *fails instead of skipping)*"),
    ],
    ids=["laptop-skips-visibly", "ci-fails"],
)
def test_store_postgres_without_a_database_url(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None, outcome: dict[str, int], says: str
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.safe_effects(store="postgres")
        def test_it(safe_ledger):
            raise AssertionError("never runs")
        """
    )
    result = pytester.runpytest("-rs")
    result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines([says])


def test_the_report_header_says_when_auto_falls_back_to_sqlite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_it(): pass")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"safe-effects: store='auto' falls back to SQLite ({PG_URL_ENV} is unset)"])


@pytest.mark.postgres
@pytest.mark.parametrize("own_schema", ["", "schema=se_test_unused"], ids=["plain", "with-schema"])
def test_with_a_database_url_each_test_gets_a_schema_dropped_afterwards(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pg_url: str, own_schema: str
) -> None:
    url = f"{pg_url}{'&' if '?' in pg_url else '?'}{own_schema}" if own_schema else pg_url
    monkeypatch.setenv(PG_URL_ENV, url)  # a store URL may name a schema: each test's own replaces it
    pytester.makepyfile(
        """
        import pytest
        from safe_effects import PostgresStore, SQLiteStore

        def test_auto_picks_postgres(safe_ledger, pytestconfig):
            assert isinstance(safe_ledger.store, PostgresStore)
            pytestconfig.stash.setdefault("schemas", []).append(safe_ledger.store.schema)
            (pytestconfig.rootpath / "schema.txt").write_text(safe_ledger.store.schema)

        @pytest.mark.safe_effects(store="sqlite")
        def test_sqlite_on_demand(safe_ledger):
            assert isinstance(safe_ledger.store, SQLiteStore)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"safe-effects: store='auto' uses PostgreSQL ({PG_URL_ENV} is set)"])
    schema = (pytester.path / "schema.txt").read_text()
    with psycopg.connect(pg_url) as conn:
        found = conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)).fetchall()
    assert schema.startswith("se_plugin_")
    assert found == []


def test_a_marker_crash_point_never_hit_fails_the_test_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from safe_effects import SimulatedCrash
        from stripe_safe import StripeClient

        @pytest.mark.safe_effects(crash_at=["before_dispatch", "during_receipt_persist"])
        def test_it(safe_ledger, fake_stripe):
            client = StripeClient("sk_test_1", ledger=safe_ledger, base_addresses={"api": fake_stripe.url})
            with pytest.raises(SimulatedCrash):  # the first point ends the call: the second is never reached
                client.v1.customers.create(params={"email": "a@b.c"}, options={"idempotency_key": "c:1:create:v1"})

        @pytest.mark.safe_effects(crash_at=["before_dispatch", "during_receipt_persist"], assert_all_fired=False)
        def test_opted_out(safe_ledger):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*1 fault(s) set up by this test never fired, or not as often as set up:",
            "*- safe_ledger crash_at: during_receipt_persist",
        ]
    )
    result.stdout.no_fnmatch_line("*crash_at: before_dispatch*")


def test_a_drop_trap_is_taken_off_a_long_lived_fake_even_when_its_test_failed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, urllib.request
        from safe_effects.testing import FakeHTTPServer, FakeResponse

        @pytest.fixture(scope="module")
        def server():
            with FakeHTTPServer(lambda r: FakeResponse(200, b"ok", committed=True)) as s:
                yield s

        def test_arms_a_trap_and_fails(safe_crash, server):
            safe_crash.at(server, "after_provider_accept")
            safe_crash.at(server, "after_dispatch")
            raise AssertionError("the real failure")

        def test_the_next_test_is_answered(server):
            request = urllib.request.Request(server.url + "/x", data=b"{}", method="POST")
            assert urllib.request.urlopen(request, timeout=5).read() == b"ok"
            assert server.pending_faults() == []
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*the real failure*"])
