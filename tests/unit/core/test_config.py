"""Config loading: the shipped files load; typos and bad values fail with their key named."""

from __future__ import annotations

import pytest

from core.config import CONFIG_DIR, ConfigError, TrilemmaConfig
from serve_app.cli import main


def _raw() -> dict:
    return TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").model_dump()


@pytest.mark.parametrize("name", ["local-cpu.yaml", "gpu.yaml", "gpu-h200.yaml", "traffic-split-h200.yaml"])
def test_shipped_configs_load(name):
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / name)
    assert {pool.role for pool in config.pools.values()} == {"short", "long"}
    assert set(config.scenarios) == {"chat", "quality", "cost", "batch"}


def test_defaults_match_the_scenario_profiles():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    chat, quality, cost, batch = (config.scenarios[n] for n in ("chat", "quality", "cost", "batch"))
    assert chat.max_tokens_cap == 128 and chat.priority == min(s.priority for s in config.scenarios.values())
    assert quality.max_temperature == 0.1 and quality.unquantized_only
    assert cost.max_tokens_cap == 64 and cost.prefer == "cheapest"
    assert batch.priority == max(s.priority for s in config.scenarios.values())
    assert config.routing.short_context_threshold_tokens == 1024


def _error_for(mutate) -> str:
    raw = _raw()
    mutate(raw)
    with pytest.raises(ConfigError) as caught:
        TrilemmaConfig.from_dict(raw, source="test.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda r: r["pools"]["short"].update(max_num_seq=4), "pools.short.max_num_seq: Extra inputs"),
        (lambda r: r.update(routng={}), "routng: Extra inputs"),
        (lambda r: r["scenarios"]["chat"].update(max_token_cap=5), "scenarios.chat.max_token_cap"),
        (lambda r: r["pools"]["short"].update(max_model_len=0), "pools.short.max_model_len"),
        (lambda r: r["pools"]["long"].update(role="huge"), "pools.long.role"),
        (lambda r: r["routing"].update(short_context_threshold_tokens="many"), "short_context_threshold_tokens"),
        (lambda r: r["scenarios"]["cost"].update(pools=["tiny"]), "unknown pools ['tiny']"),
        (lambda r: r["routing"].update(default_scenario="nope"), "default_scenario 'nope'"),
        (lambda r: r["pools"]["short"].update(engine_kwargs={"max_model_len": 9}), "must not set ['max_model_len']"),
        (lambda r: r.update(pools={}), "at least one pool"),
        (lambda r: r["pools"].update({"Bad_Name": r["pools"]["short"]}), "pool name 'Bad_Name'"),
        (lambda r: r["http"].update(port=70000), "http.port"),
        (lambda r: r["pools"]["short"]["admission"].update(queue_share={0: 1.0, 1: 1.5, 2: 1, 3: 1}),
         "queue_share values must be within [0, 1]; got {1: 1.5}"),
        (lambda r: r["scenarios"]["batch"].update(priority=7),
         "pools.short.admission.queue_share lists no share for scenario priorities [7]"),
        (lambda r: r["pools"]["short"].update(max_ongoing_requests=20),
         "max_ongoing_requests (20) must be at least admission.max_in_engine + admission.max_queued + 1 (49)"),
        (lambda r: r["pools"]["short"].update(replica_router="random"), "pools.short.replica_router"),
        (lambda r: r["pools"]["short"]["admission"].update(max_queue=3), "admission.max_queue: Extra inputs"),
        (lambda r: r["pools"]["short"].update(gpu_fraction=0.5), "gpu_fraction is for GPU pools"),
        (lambda r: r["pools"]["short"].update(accelerator="H200", gpu_fraction=1.5), "pools.short.gpu_fraction"),
        (lambda r: r["pools"]["short"].update(accelerator="H200", gpu_fraction=0.5,
                                              engine_kwargs={"tensor_parallel_size": 2}),
         "gpu_fraction needs a single-GPU engine"),
    ],
)
def test_bad_config_names_the_key(mutate, expected):
    message = _error_for(mutate)
    assert message.startswith("test.yaml: ")
    assert expected in message


def test_unreadable_yaml_is_a_config_error(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("pools: [unclosed")
    with pytest.raises(ConfigError, match="broken.yaml: cannot read config"):
        TrilemmaConfig.from_yaml(path)


def test_default_budget_never_exceeds_the_cap():
    raw = _raw()
    raw["scenarios"]["chat"]["default_max_tokens"] = 500
    config = TrilemmaConfig.from_dict(raw)
    assert config.scenarios["chat"].default_max_tokens == 128


def test_scenario_admits_by_list_and_quantization():
    raw = _raw()
    raw["pools"]["long"]["quantization"] = "fp8"
    raw["scenarios"]["cost"]["pools"] = ["short"]
    config = TrilemmaConfig.from_dict(raw)
    quality, cost, chat = config.scenarios["quality"], config.scenarios["cost"], config.scenarios["chat"]
    assert quality.admits("short", config.pools["short"])
    assert not quality.admits("long", config.pools["long"])
    assert not cost.admits("long", config.pools["long"])
    assert chat.admits("long", config.pools["long"])


def test_cli_names_a_bad_config_and_exits_2(tmp_path, capsys):
    path = tmp_path / "typo.yaml"
    path.write_text("pools: {short: {role: short, max_model_len: 64, max_num_seq: 4}}\nscenarios: {}\n")
    assert main(["check-config", str(path)]) == 2
    assert "pools.short.max_num_seq: Extra inputs are not permitted" in capsys.readouterr().err


def test_a_relative_model_folder_becomes_absolute_and_an_id_passes_through(tmp_path, monkeypatch):
    from core.model_store import resolve_model_source

    (tmp_path / "models" / "smol").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_source("models/smol") == str(tmp_path / "models" / "smol")
    assert resolve_model_source("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_set_arguments_override_dotted_keys_read_as_yaml():
    from core.config_base import parse_overrides

    overrides = parse_overrides(["router.replicas=2", "pools.short.engine_kwargs.enable_prefix_caching=false",
                                 " model.source = /models/smol"])
    assert overrides == {"router.replicas": 2, "pools.short.engine_kwargs.enable_prefix_caching": False,
                         "model.source": "/models/smol"}
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").with_overrides(
        {"router.replicas": 2, "pools.short.engine_kwargs.enable_prefix_caching": False})
    assert config.router.replicas == 2 and config.pools["short"].engine_kwargs["enable_prefix_caching"] is False
    with pytest.raises(ConfigError, match="expected DOTTED.KEY=VALUE"):
        parse_overrides(["router.replicas"])
    with pytest.raises(ConfigError, match="router.replica: Extra inputs"):
        config.with_overrides({"router.replica": 2})
