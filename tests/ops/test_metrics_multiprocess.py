"""Metrics under prometheus_client's multiprocess mode, as a gunicorn or Celery prefork deployment serves them.

The mode is chosen when prometheus_client is imported (``PROMETHEUS_MULTIPROC_DIR``), so each case runs in a
fresh interpreter whose worker processes are forked from it, with real SQLite ledgers and the generic fake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SWEEPS_IN_RECYCLED_WORKERS = textwrap.dedent(
    """
    import json, multiprocessing, os, sys, time
    store, fake = sys.argv[1], sys.argv[2]

    def sweep(_):
        from safe_effects import Ledger, PrometheusObserver, Reconciler
        from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider
        with Ledger.open(store, observer=PrometheusObserver()) as ledger:
            Reconciler(ledger, {"fake": GenericFakeAdapter(GenericFakeProvider(fake))}).run_once()
        return os.getpid()

    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:  # a new worker per task
        pids = [pool.apply(sweep, (n,)) for n in range(2)]
        time.sleep(0.05)
    from prometheus_client import CollectorRegistry, multiprocess
    for pid in pids:
        multiprocess.mark_process_dead(pid)  # what gunicorn's child_exit hook does (docs/operations.md)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    series = {
        f"{sample.name}{sorted(sample.labels.items())}": sample.value
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name.startswith("safe_effects_reconciler_")
    }
    print(json.dumps({"pids": pids, "series": series}))
    """
)


def test_a_recycled_reconciler_leaves_one_last_run_series_with_the_newest_sweep(tmp_path: Path) -> None:
    """The metrics review: per pid, the default gauge mode kept a dead worker's last sweep as a series of its
    own for good, and SafeEffectsReconcilerDown fired on it while the live worker swept every minute."""
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
    store, fake = f"sqlite:///{tmp_path / 'ledger.db'}", str(tmp_path / "fake.db")
    done = subprocess.run(
        [sys.executable, "-c", SWEEPS_IN_RECYCLED_WORKERS, store, fake],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(set(report["pids"])) == 2  # two workers, the first gone
    last_runs = {name: value for name, value in report["series"].items() if "last_run" in name}
    assert list(last_runs) == ["safe_effects_reconciler_last_run_timestamp_seconds[]"]  # one series, no pid
    assert report["series"]["safe_effects_reconciler_runs_total[]"] == 2  # the sweeps of both workers, summed
