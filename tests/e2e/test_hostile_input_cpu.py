"""The corpus of hostile bodies against the real engine: every answer sound (never a 5xx),
the engine's own limits refused with a 400 that says why, and the app serving after all."""

from __future__ import annotations

import httpx
import pytest

from tests.hostile_bodies import HOSTILE_BODIES, MODEL, assert_answer_is_sound

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("case", HOSTILE_BODIES, ids=lambda case: case.name)
def test_hostile_bodies_get_a_sound_answer_from_the_real_engine(base_url, api_key, case):
    response = httpx.post(f"{base_url}{case.path}", content=case.body, timeout=120, headers={
        "content-type": "application/json", "Authorization": f"Bearer {api_key}"})
    assert_answer_is_sound(response)
    if case.engine_status is not None:
        assert response.status_code == case.engine_status, response.text[:500]
    still = httpx.post(f"{base_url}/v1/chat/completions", timeout=120, headers={"Authorization": f"Bearer {api_key}"},
                       json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert still.status_code == 200, still.text
