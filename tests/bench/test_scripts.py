"""The benchmark scripts still run, and still print what bench/report.py reads to write docs/benchmarks.md.

No figure is judged here (speed and memory are for the scripts to measure, never a timed test): each script
runs with a handful of calls, and the test checks it exits cleanly, covers every store, and that the report's
parsers find its rows, so a changed column cannot silently drop a line from the published page. The one
correctness figure they print is checked: 8 processes on one key make exactly one provider dispatch.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from safe_effects import EffectStatus, SQLiteStore

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def report() -> Iterator[ModuleType]:
    """bench/report.py as a module (it imports _harness by plain name, so bench/ goes on sys.path)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH))
        spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        patch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module


@pytest.fixture(scope="module")
def pg(request: pytest.FixtureRequest) -> str:
    """The test PostgreSQL's URL, or '' where it is unreachable off CI (the scripts then report SQLite only)."""
    try:
        return str(request.getfixturevalue("pg_url"))
    except pytest.skip.Exception:
        return ""


@pytest.fixture(scope="module")
def stores(pg: str) -> set[str]:
    return {"sqlite", "postgres"} if pg else {"sqlite"}


def run(script: str, pg: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--pg", pg, *args],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    if pg:
        assert "skipped" not in done.stdout, done.stdout
    return done.stdout


def test_ledger_overhead_rows_are_read_and_one_key_dispatches_once(
    report: ModuleType, pg: str, stores: set[str]
) -> None:
    out = run("ledger_overhead.py", pg, "--seconds", "8")
    lines = [line.strip() for line in out.splitlines()]
    rows = [m for line in lines if (m := report._LEDGER_ROW.match(line))]
    one_key = [m for line in lines if (m := report._ONE_KEY.match(line))]
    assert {(m["store"], m["workers"]) for m in rows} == {(s, w) for s in stores for w in ("1", "8")}
    assert {m["store"] for m in one_key} == stores
    assert [m["dispatches"] for m in one_key] == ["1"] * len(stores)
    assert all(float(m[column]) > 0 for m in rows for column in ("raw", "exec"))
    tails = [line for line in lines if "99th percentile ms: raw " in line]
    assert len(tails) == len(rows), out


@pytest.mark.parametrize("script", ["stripe_overhead.py", "sendgrid_overhead.py", "ses_overhead.py"])
def test_provider_overhead_rows_are_read(report: ModuleType, pg: str, stores: set[str], script: str) -> None:
    out = run(script, pg, "--calls", "3", "--seconds", "10")
    rows = report.parse_rows(out)
    assert {row.store for row in rows} == stores
    assert all(row.n >= 1 and row.raw_ms > 0 and row.wrapped_ms > 0 and row.two_commit_ms > 0 for row in rows)
    hand_rolled = report.hand_rolled_reading(script, out)  # the diagnostic line under each row, with its store
    assert hand_rolled.startswith(f"Beside a hand-rolled ledger ({script.removesuffix('_overhead.py')}): ")
    assert {s for s in stores if f"{s}: its two commits add " in hand_rolled} == stores, out


def test_memory_rows_are_read(report: ModuleType, pg: str, stores: set[str]) -> None:
    out = run("memory_overhead.py", pg, "--calls", "5", "--warmup", "5")
    rows = [m for line in out.splitlines() if (m := report._MEMORY_ROW.match(line.strip()))]
    subjects = {"executor", "stripe", "sendgrid", "ses"}
    assert {(m["subject"], m["store"]) for m in rows} == {(s, store) for s in subjects for store in stores}
    assert report.memory_reading(out).startswith("Memory: ")


def test_cpu_split_rows_and_readings_are_read(report: ModuleType, pg: str, stores: set[str]) -> None:
    out = run("cpu_split.py", pg, "--calls", "5", "--slices", "1")
    rows = [line.split() for line in out.splitlines() if line.split()[1:2] in (["raw"], ["executor"])]
    measured = stores | ({"sqlite-ram"} if Path("/dev/shm").is_dir() else set())
    assert {(row[0], row[1]) for row in rows} == {(s, m) for s in measured for m in ("raw", "executor")}
    readings = [m for line in out.splitlines() if (m := report._CPU_READING.match(line.strip()))]
    expected = stores if "sqlite-ram" in measured else stores - {"sqlite"}  # SQLite's reading needs both
    assert {m["store"] for m in readings} == expected
    if pg:  # the test database runs on this machine: its processes' CPU is read, so the budget is printed
        assert any(m["store"] == "postgres" and "the executor uses" in m["text"] for m in readings), out


def test_the_machine_facts_carry_a_python_yardstick(report: ModuleType) -> None:
    """Runs on different machines are compared by it: the executor's extra cost is mostly Python."""
    facts = report.machine_facts("", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    [row] = [line for line in facts.splitlines() if "yardstick" in line]
    assert re.fullmatch(r"\| Python yardstick: a 1,000,000-step loop, best of 5 \| [1-9]\d* ms \|", row), row


def test_the_workers_of_a_ledger_slice_measure_at_the_same_time(tmp_path: Path) -> None:
    """Eight workers must mean eight at once: workers that start as each is ready measure less contention.

    Spawned processes come up one after another; without a common start the first worker of a slice was
    done before the last began, and an 8-worker raw slice on SQLite measured about one writer at a time.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH))  # the spawned workers inherit it and import the script by name
        harness = importlib.import_module("_harness")
        ledger_overhead = importlib.import_module("ledger_overhead")
        for module in (harness, ledger_overhead):  # imported by plain name: gone again with bench/ from the path
            patch.setitem(sys.modules, module.__name__, module)
        url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
        harness.migrate(url)
        with ledger_overhead.workers_pool(3) as workers:
            spans = workers.run_slice("raw", url, seconds=0.6)
    starts, ends = [start for _, start, _ in spans], [end for _, _, end in spans]
    assert len(spans) == 3
    assert max(starts) - min(starts) < 0.1, starts  # they began together...
    assert min(ends) >= max(starts) + 0.5, (starts, ends)  # ...and every one was still calling at the close


def test_purge_batches_prints_a_line_per_batch_size(pg: str) -> None:
    out = run("purge_batches.py", pg, "--records", "3000", "--batches", "2", "--sizes", "100", "20")
    lines = re.findall(r"^batch +(\d+): delete median [\d.]+ ms, longest [\d.]+ ms$", out, re.MULTILINE)
    assert lines == ["100", "20"], out


def test_the_instruction_count_runs_what_it_counts(tmp_path: Path) -> None:
    """bench/instructions.py's child runs the counted effects (callgrind around it takes minutes, so the
    suite runs the body alone): the raw pair's rows and the executor's confirmed records, as many as asked."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    store = SQLiteStore(tmp_path / "ledger.sqlite3")
    store.migrate()
    store.close()
    for mode in ("raw", "executor"):
        child = [sys.executable, str(BENCH / "instructions.py"), "--child", mode, "--url", url, "--calls", "3"]
        subprocess.run(child, cwd=BENCH.parent, check=True, timeout=60)
    store = SQLiteStore(tmp_path / "ledger.sqlite3")
    try:
        confirmed = store.list_by_status([EffectStatus.CONFIRMED], limit=10)
    finally:
        store.close()
    assert sorted(record.tenant for record in confirmed) == ["bench-raw"] * 3 + ["default"] * 3
