"""The safe-effects pytest plugin, loaded through the ``pytest11`` entry point: test your own ugly path.

Fixtures: ``safe_ledger`` (on ``safe_store_url`` and ``safe_clock``), ``safe_crash``, ``safe_cassette``,
``safe_faults`` and ``safe_options``; provider packages add their fakes (``fake_stripe``, ``fake_sendgrid``,
``fake_ses``). Per-test options: ``@pytest.mark.safe_effects(...)``. See docs/testing.md.
"""

from ._plugin._fixtures import (
    safe_cassette,
    safe_clock,
    safe_crash,
    safe_faults,
    safe_ledger,
    safe_options,
    safe_store_url,
)
from ._plugin._hooks import (
    pytest_configure,
    pytest_report_header,
    pytest_runtest_makereport,
    pytest_runtest_setup,
)

__all__ = [
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_setup",
    "pytest_runtest_makereport",
    "safe_options",
    "safe_faults",
    "safe_clock",
    "safe_store_url",
    "safe_ledger",
    "safe_crash",
    "safe_cassette",
]
