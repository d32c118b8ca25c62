"""Property-based fuzzing of the service's OpenAPI schema with schemathesis (a short run): whatever a
generated request holds, the service never answers with a 5xx."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")

from hypothesis import HealthCheck, given, settings  # noqa: E402

from _service_support import ServiceProcess  # noqa: E402

from reflection.testing.upstream import StandInModel  # noqa: E402

pytestmark = pytest.mark.slow  # processes, servers or subprocess CLI runs: `pytest -m "not slow"` leaves them out

KEY = "fuzz-key"


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    with StandInModel(idle_timeout=120) as upstream:
        config = {
            "service": {"api_keys": [KEY], "deadline_seconds": 20},
            "upstream": {"base_url": upstream.base_url, "max_reflect_rounds": 1},
        }
        server = ServiceProcess(tmp_path_factory.mktemp("fuzz"), config).start()
        yield server
        server.stop()


def test_no_generated_request_gets_a_server_error(fuzzed):
    schema = schemathesis.openapi.from_url(fuzzed.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case):
            case.call_and_validate(
                base_url=fuzzed.url,
                headers={"Authorization": f"Bearer {KEY}"},
                checks=[schemathesis.checks.not_a_server_error],
            )

        fuzz()
