"""Hostile input, not just wrong input: the HTTP API fuzzed from its own OpenAPI schema with
schemathesis, and a corpus of what fuzzers miss (huge and deeply nested bodies, invalid UTF-8,
100,000 messages, numbers at and past their bounds, unknown fields). Every answer is a success
or a 4xx in OpenAI's error shape: never a 5xx, never a crash."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, note, settings

from tests.hostile_bodies import HOSTILE_BODIES, assert_answer_is_sound

pytestmark = pytest.mark.integration

# Generated cases per API operation: 7 of the 9 take that many (the other 2 have no input to vary), 2,100 in all.
CASES_PER_OPERATION = 300


def test_generated_requests_get_a_sound_answer(fake_app_url):
    schema = schemathesis.openapi.from_url(f"{fake_app_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9  # the OpenAI paths, the scenario paths, the pools path
    cases = 0
    for operation in operations:

        @settings(max_examples=CASES_PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def answered_soundly(case) -> None:
            nonlocal cases
            cases += 1
            response = case.call(base_url=fake_app_url, timeout=60)
            note(case.as_curl_command())
            assert_answer_is_sound(response)

        answered_soundly()
    print(f"{cases} generated requests over {len(operations)} operations")
    assert cases >= 2000


@pytest.mark.parametrize("case", HOSTILE_BODIES, ids=lambda case: case.name)
def test_corpus_of_hostile_bodies_gets_a_sound_answer(fake_app_url, case):
    response = httpx.post(f"{fake_app_url}{case.path}", content=case.body, timeout=60,
                          headers={"content-type": "application/json"})
    assert_answer_is_sound(response)
    if case.router_status is not None:  # the rest is the engine's to judge (the e2e tier)
        assert response.status_code == case.router_status, response.text[:500]
