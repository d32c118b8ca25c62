"""pytest plugin (registered through the `pytest11` entry point): the `fake_judge` fixture.

Imports nothing heavy at load time, so installing reflection never breaks a user's pytest
even without the `testing` extra (respx).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from reflection.testing import FakeJudge


@pytest.fixture
def fake_judge() -> Iterator[FakeJudge]:
    """A `FakeJudge` intercepting HTTP for the test's duration; all checks pass unless scripted.

    Pass `fake_judge.config` as the judge config: `ReflectionConfig(judge=fake_judge.config)`.
    Needs `pip install "toolcall-reflection[testing]"`.
    """
    from reflection.testing import FakeJudge

    with FakeJudge() as judge:
        yield judge
