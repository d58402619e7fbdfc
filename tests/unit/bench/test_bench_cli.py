"""`trilemma bench` argument handling: bad input is a clear error and exit code 2."""

from __future__ import annotations

import argparse

import pytest

from bench.cli import parse_slo
from bench.datasets import jsonl_dataset
from bench.metrics import Slo
from core.config import DEFAULT_CONFIG_PATH
from serve_app.cli import main


def test_parse_slo():
    assert parse_slo("chat:ttft_ms=500,tpot_ms=100") == ("chat", Slo(ttft_s=0.5, tpot_s=0.1))
    assert parse_slo("batch:e2e_ms=30000") == ("batch", Slo(e2e_s=30.0))


@pytest.mark.parametrize("spec", ["chat", "chat:ttfx=3", "chat:ttft_ms=fast"])
def test_bad_slo_is_rejected(spec):
    with pytest.raises(argparse.ArgumentTypeError, match="bad --slo"):
        parse_slo(spec)


@pytest.mark.parametrize("argv, message", [
    (["--slo", "chat:ttfx=3"], "unknown limits ['ttfx']"),
    (["--dataset", "jsonl"], "needs --dataset-path"),
    (["--url", "http://127.0.0.1:9"], "cannot list models at http://127.0.0.1:9/v1/models"),
])
def test_bench_run_refuses_clearly(argv, message, capsys):
    assert main(["bench", "run", "--num-prompts", "1", *argv]) == 2
    assert message in capsys.readouterr().err


def test_dataset_export_round_trips(tmp_path):
    out = tmp_path / "prompts.jsonl"
    assert main(["bench", "dataset", "--num-prompts", "6", "--out", str(out)]) == 0
    assert len(jsonl_dataset(out)) == 6


def test_the_stored_command_masks_the_api_key():
    from argparse import Namespace

    from bench.cli_common import command_line as _command

    assert _command(Namespace(argv=["bench", "run", "--api-key", "tk-secret", "--rate", "1"])) == (
        "trilemma bench run --api-key '***' --rate 1")
    assert "tk-secret" not in _command(Namespace(argv=["bench", "run", "--api-key=tk-secret"]))


def test_set_overrides_a_config_key_and_names_a_bad_one(tmp_path):
    from bench.cli_common import app_config as _app_config
    from core.config import ConfigError

    def args(*overrides):
        return argparse.Namespace(config=DEFAULT_CONFIG_PATH, set=list(overrides))

    config = _app_config(args("pools.short.max_num_seqs=4", "model.source=/models/smol"))
    assert config.pools["short"].max_num_seqs == 4 and config.model.source == "/models/smol"
    with pytest.raises(ConfigError, match="--set: pools.tiny.replicas: the config has no 'pools.tiny'"):
        _app_config(args("pools.tiny.replicas=2"))
    with pytest.raises(ConfigError, match="expected DOTTED.KEY=VALUE"):
        _app_config(args("pools.short.replicas"))


def test_with_takes_only_a_split_run_of_the_same_load(tmp_path):
    import json

    from bench.cli import _earlier_arm
    from bench.cli_common import shown_path as _shown_path

    settings = dict(rate=1.0, num_prompts=120, long_fraction=0.05, long_words=3000, short_scenario="chat",
                    long_scenario="batch", warmup_s=30.0, ignore_eos=False, seed=0, set=[])
    earlier = tmp_path / "split.json"
    earlier.write_text(json.dumps({"config": {"app_config": _shown_path(DEFAULT_CONFIG_PATH), **settings},
                                   "phases": {"split_mixed": {}}}))

    def args(arm="shared", **changes):
        return argparse.Namespace(config=DEFAULT_CONFIG_PATH, with_result=earlier, arm=arm, **{**settings, **changes})

    assert _earlier_arm(args())["phases"] == {"split_mixed": {}}
    with pytest.raises(ValueError, match="differs in \\['rate', 'seed'\\]"):
        _earlier_arm(args(rate=2.0, seed=1))
    with pytest.raises(ValueError, match="use it with --arm shared"):
        _earlier_arm(args(arm="both"))
