"""examples/alerts.yml: every metric it names is one safe-effects exports, and its rules do what they say.

The rules' behaviour (a scrape gap is not a new event, a reconciler split is not an error, ...) is checked by
promtool's own unit tests in alerts_test.yml, where promtool is installed (Debian: the prometheus package).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from safe_effects import PrometheusObserver, SQLiteStore, StoreCollector

HERE = Path(__file__).parent
RULES = HERE.parents[1] / "examples" / "alerts.yml"
PROMETHEUS_OWN = {"up"}


def exported_names(tmp_path: Path) -> set[str]:
    """Every sample name a worker, a reconciler and the exporter can expose (counters with ``_total``)."""
    store = SQLiteStore(tmp_path / "ledger.db")
    store.migrate()
    registry = CollectorRegistry()
    PrometheusObserver(registry)
    registry.register(StoreCollector(store))
    try:
        return {family.name + ("_total" if family.type == "counter" else "") for family in registry.collect()}
    finally:
        store.close()


def test_every_metric_an_alert_names_is_exported(tmp_path: Path) -> None:
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    named = {name for rule in rules for name in re.findall(r"\b(safe_effects_[a-z_]+|up)\b", rule["expr"])}
    assert {"safe_effects_unrecorded_effects_total", "safe_effects_store_up"} <= named
    assert named - PROMETHEUS_OWN <= exported_names(tmp_path)


def test_the_rules_pass_promtools_unit_tests() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt install prometheus): alerts_test.yml not run")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"], cwd=HERE, capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
