"""Machine instructions per effect, counted by valgrind's callgrind: the raw two-commit pair and the executor.

Wall-clock figures move with everything else a shared VM runs; instruction counts do not (the same code,
input and interpreter count the same whatever the other core does), so this is how to tell whether a change
to the executor's hot path made it cheaper, in one run, on a noisy machine. It counts this process only:
the client's work, not the fsync's wait nor the PostgreSQL server's work (the same for both modes, as both
write the same rows). SQLite runs in a RAM-backed directory (/dev/shm) so that no disk enters the count.

Each (store, mode) runs twice under callgrind, with ``--calls`` more effects the second time; the difference
divided by ``--calls`` is the count per effect, free of start-up and import costs. Needs ``valgrind`` on PATH
(Debian: apt install valgrind). Under valgrind Python runs about fifty times slower: a few minutes per store.

    .venv/bin/python bench/instructions.py [--calls 500] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import DEFAULT_PG, TARGET, fresh_key, migrate, raw_pair, store_targets
from ledger_overhead import REQUEST, InstantAdapter

from safe_effects import Ledger

MODES = ("raw", "executor")
BASE_CALLS = 200  # effects in the shorter run: warms the statement caches both runs share
RAM_DIR = Path("/dev/shm")
_COLLECTED = re.compile(r"Collected : (\d+)")


def run_effects(url: str, mode: str, calls: int) -> None:
    """The measured body, in the child that callgrind runs: ``calls`` effects of ``mode`` on ``url``."""
    if mode == "raw":
        with raw_pair(url) as pair:
            for _ in range(calls):
                pair(fresh_key())
        return
    adapter = InstantAdapter()
    with Ledger.open(url) as ledger:
        for _ in range(calls):
            ledger.execute(adapter, REQUEST, intent_key=fresh_key("exec"))


def counted(url: str, mode: str, calls: int) -> int:
    """Instructions callgrind counts for a child process running ``calls`` effects."""
    child = [sys.executable, __file__, "--child", mode, "--url", url, "--calls", str(calls)]
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *child],
        capture_output=True,
        text=True,
        check=True,
    )
    found = _COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_effect(url: str, mode: str, calls: int) -> float:
    return (counted(url, mode, BASE_CALLS + calls) - counted(url, mode, BASE_CALLS)) / calls


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--calls", type=int, default=500, help="effects the longer run adds")
    cli.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL URL; '' skips PostgreSQL")
    cli.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    cli.add_argument("--url", help=argparse.SUPPRESS)
    args = cli.parse_args()
    if args.child:
        run_effects(args.url, args.child, args.calls)
        return
    if shutil.which("valgrind") is None:
        print("instructions: skipped, valgrind is not installed (Debian: apt install valgrind)")
        return
    print(f"{'store':<10} {'raw k/effect':>12} {'executor k/effect':>17} {'ratio':>6}")
    with tempfile.TemporaryDirectory(dir=RAM_DIR if RAM_DIR.is_dir() else None) as ram:
        sqlite = f"sqlite:///{Path(ram) / 'ledger.db'}"
        migrate(sqlite)
        with store_targets(args.pg) as targets:
            urls = [("sqlite-ram", sqlite)] + [(t.name, t.url) for t in targets if t.name == "postgres"]
            for name, url in urls:
                raw, executor = (per_effect(url, mode, args.calls) for mode in MODES)
                print(f"{name:<10} {raw / 1000:12.1f} {executor / 1000:17.1f} {executor / raw:6.2f}")
    print(
        f"instructions of this process only (PostgreSQL's server work and the fsync wait are not counted); the "
        f"executor target (<= {TARGET} x raw) is on wall time, which these ratios overstate by that uncounted work"
    )


if __name__ == "__main__":
    main()
