"""A service worker settles for a long life: what it holds at start-up leaves the collector's
sight and full collections come seldom (a large request set off 25-30 ms ones before)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reflection._gc import CACHE_HEAVY_THRESHOLD


@pytest.mark.slow
def test_a_service_worker_freezes_what_it_holds_and_collects_seldom():
    code = (
        "import gc\n"
        "from reflection.service._worker import app_from_env\n"
        "before = gc.get_freeze_count()\n"
        "app_from_env()\n"
        "print(before, gc.get_freeze_count() > 10_000, gc.get_threshold())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split(maxsplit=1) == ["0", f"True {CACHE_HEAVY_THRESHOLD}\n"]


def test_the_batch_workers_use_the_same_thresholds():
    from reflection.batch import _workers

    assert _workers.STATIC_GC_THRESHOLD == CACHE_HEAVY_THRESHOLD
