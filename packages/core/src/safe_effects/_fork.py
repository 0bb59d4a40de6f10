"""What a ledger must not share with a process forked from the one that opened it.

gunicorn's ``--preload``, Celery's prefork pool and multiprocessing's ``fork`` start method copy a ledger
opened in the parent into every child. Shared, its database connections mix processes: SQLite's locks and
WAL index are per process, and a PostgreSQL socket's replies go to whichever process reads first. Its claim
tags, which prove that a claim is this very ledger's own, would repeat in every child. So each object
holding such state registers here, and in a child it starts afresh before anything else uses it.

Forking while another thread is inside a ledger call is still unsafe: SQLite's and libpq's own locks held
by a thread that does not exist in the child can hang it. Fork from a process at rest, or open the ledger
after the fork (gunicorn's ``post_fork``, Celery's ``worker_process_init``).
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class Renewable(Protocol):
    def _renew_after_fork(self) -> None:
        """In a forked child: let go of what the parent's copy holds without disturbing the parent, and start
        afresh (each class says how: SQLite closes its inherited connections, PostgreSQL keeps its sessions)."""
        ...


_live: weakref.WeakSet[Renewable] = weakref.WeakSet()
_inherited: list[object] = []  # the parent's PostgreSQL pools, kept so that nothing here ever closes them


def renew_in_children(holder: Renewable) -> None:
    """Have ``holder`` renew its state in every process forked from this one from now on."""
    _live.add(holder)


def keep_inherited(*things: object) -> None:
    """Keep what a child inherited referenced for its lifetime: garbage collected, it would be closed."""
    _inherited.extend(things)


def _after_fork_in_child() -> None:
    for holder in list(_live):
        holder._renew_after_fork()


if hasattr(os, "register_at_fork"):  # POSIX; there is no fork elsewhere
    os.register_at_fork(after_in_child=_after_fork_in_child)
