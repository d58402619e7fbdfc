"""The app answers as plain `vllm serve` does: the parity suite (bench/parity) sent to plain vLLM
with the short pool's engine settings and to the app, on the real CPU engine and the embedded
model. Every case is at parity or a difference docs/api.md lists."""

from __future__ import annotations

import pytest

from bench.parity.cli import markdown, plain_vllm_of_pool, run_suite, suite_for, summary
from bench.parity.differences import DIFFERENCES
from tests.support import config_for_tests

pytestmark = pytest.mark.e2e


def test_every_case_is_at_parity_with_plain_vllm_or_a_documented_difference(base_url, api_key, embedded_model_dir,
                                                                             tmp_path):
    config = config_for_tests()
    model = config.default_model
    suite = suite_for(config, model, "short")
    with plain_vllm_of_pool(config, "short", tmp_path) as plain_url:
        results = run_suite(suite, plain_url, base_url, None, api_key)
    result = summary(results, command="tests/e2e/test_parity_cpu.py", url_a=plain_url, url_b=base_url, model=model)
    assert result["counts"]["differs"] == 0, markdown(result)
    # Every difference docs/api.md lists is seen, as documented.
    seen = {verdict.difference for _, _, _, verdict in results if verdict.outcome == "documented"}
    assert seen == {difference.why for difference in DIFFERENCES.values()}, markdown(result)
