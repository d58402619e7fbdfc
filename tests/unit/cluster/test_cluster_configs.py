"""The cluster configs: the launcher config passes Ray's own cluster-config schema before and
after `cluster plan` writes it, the KubeRay manifests carry a Serve config Ray parses and whose
args load as a Trilemma config, and their worker groups mirror the launcher's node types."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from cluster import launcher_config
from cluster.launcher_config import DEFAULT_LAUNCHER_PATH
from cluster.node_types import gpu_node_types
from cluster.plan import HeadNode, plan_cluster
from cluster.pool_needs import PoolNeed
from core.config import ConfigError, TrilemmaConfig
from core.price_catalog import PriceCatalog
from serve_app.cli import main

ROOT = Path(__file__).resolve().parents[3]
KUBERAY = ROOT / "cluster" / "kuberay"
CATALOG = PriceCatalog.from_yaml()
TYPES = {t.name: t for t in gpu_node_types(CATALOG)}
LAUNCHER_TEXT = DEFAULT_LAUNCHER_PATH.read_text()
LAUNCHER = launcher_config.parse(LAUNCHER_TEXT)


def manifest(name: str) -> dict:
    return yaml.safe_load((KUBERAY / name).read_text())


def cluster_spec(document: dict) -> dict:
    return document["spec"].get("rayClusterConfig") or document["spec"]["rayClusterSpec"]


def test_the_launcher_config_passes_rays_schema_with_the_menu_of_gpu_types():
    prepared = launcher_config.validate(LAUNCHER)
    workers = launcher_config.worker_types(prepared)
    assert sorted(workers) == sorted(f"ray.worker.{gpu}.{how}" for gpu in ("l4", "a100-40g", "h100", "h200")
                                     for how in ("on-demand", "spot"))
    # Each entry is what the plan would write for that catalog type: instance, GPUs, labels, market.
    for name, entry in workers.items():
        assert entry == launcher_config.worker_entry(TYPES[name], entry["min_workers"], entry["max_workers"])
    assert workers["ray.worker.a100-40g.spot"]["resources"] == {
        "CPU": 96, "GPU": 8, "accelerator_type:A100-40G": 1, "accelerator_type:A100": 1}
    assert launcher_config.is_spot(workers["ray.worker.h100.spot"])
    assert not launcher_config.is_spot(workers["ray.worker.h100.on-demand"])
    assert prepared["max_workers"] == sum(entry["max_workers"] for entry in workers.values())
    assert prepared["idle_timeout_minutes"] > 0


def test_the_launcher_installs_the_synced_project_with_its_gpu_extra_and_rays_pinned_version():
    assert LAUNCHER["file_mounts"] == {"~/trilemma": "."}
    assert LAUNCHER["setup_commands"] == ["cd ~/trilemma && pip install --quiet -e '.[gpu]'"]
    # No registry hosts and no paths of the machine the project was written on.
    for text in (LAUNCHER_TEXT, (KUBERAY / "Dockerfile").read_text()):
        assert not re.search(r"https?://|/work/|/home/(?!ray/)|/root/", text)
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ray_version = next(dep for dep in pinned if dep.startswith("ray[")).split("==")[1]
    image = f"rayproject/ray-llm:{ray_version}-py311-cu128"   # Python 3.11: requires-python
    assert LAUNCHER["docker"]["image"] == image
    assert f"FROM {image}" in (KUBERAY / "Dockerfile").read_text()
    for name in ("rayservice.yaml", "rayjob.yaml"):
        assert cluster_spec(manifest(name))["rayVersion"] == ray_version


def test_the_head_is_priced_per_vcpu_from_the_catalog():
    head = launcher_config.head_node(LAUNCHER, CATALOG)
    assert (head.instance_type, head.vcpus) == ("c7i.4xlarge", 16)
    assert head.usd_per_hour == pytest.approx(16 * CATALOG.accelerator("cpu").on_demand_usd_per_hour)
    assert [launcher_config.instance_vcpus(t) for t in ("g6.xlarge", "c7i.large", "p5.48xlarge")] == [4, 2, 192]


def test_a_written_plan_replaces_only_the_worker_block_and_still_passes_rays_schema():
    plan = plan_cluster([PoolNeed(pool="long", accelerator="H200", gpus_per_replica=2, gpu_memory_gib=100,
                                  min_replicas=1, max_replicas=6, purchase="spot")],
                        list(TYPES.values()), HeadNode(instance_type="c7i.4xlarge", vcpus=16, usd_per_hour=0.7))
    written = launcher_config.apply_plan(LAUNCHER_TEXT, plan)
    prepared = launcher_config.validate(launcher_config.parse(written))
    assert launcher_config.worker_types(prepared) == {
        "ray.worker.h200.spot": launcher_config.worker_entry(TYPES["ray.worker.h200.spot"], 1, 2)}
    assert prepared["max_workers"] == 2
    # The rest of the file, comments included, is as it was.
    before, after = LAUNCHER_TEXT.split(launcher_config.BLOCK_START)[0], written.split(launcher_config.BLOCK_START)[0]
    assert after == before.replace("max_workers: 20 ", "max_workers: 2 ")
    assert written.endswith(LAUNCHER_TEXT.split(launcher_config.BLOCK_END)[1])


def test_a_launcher_config_without_the_markers_is_refused():
    with pytest.raises(ConfigError, match="lacks the worker block's markers"):
        launcher_config.replace_workers("max_workers: 1\n", [])


def test_ray_rejects_a_broken_launcher_config_with_the_reason():
    broken = {**LAUNCHER, "max_workers": "many"}
    with pytest.raises(ConfigError, match="Ray rejects it: 'many' is not of type 'integer'"):
        launcher_config.validate(broken)


def test_the_rayservice_carries_the_serve_config_ray_parses_and_trilemma_loads():
    from ray.serve.schema import ServeDeploySchema

    service = manifest("rayservice.yaml")
    assert (service["apiVersion"], service["kind"]) == ("ray.io/v1", "RayService")
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    schema = ServeDeploySchema.model_validate(serve_config)
    (app,) = schema.applications
    assert app.import_path == "serve_app.app:app_builder"
    # What app_builder receives, from any working directory: the config is found in the project.
    config = TrilemmaConfig.from_yaml(app.args["config"])
    assert {pool.accelerator for pool in config.pools.values()} == {"L4", "A100-80G"}
    # `serve deploy cluster/serve.yaml` on the launcher's cluster serves the same applications.
    assert yaml.safe_load((ROOT / "cluster" / "serve.yaml").read_text()) == serve_config
    assert cluster_spec(service)["enableInTreeAutoscaling"] is True


def test_the_rayjob_runs_the_batch_job_on_a_cluster_it_tears_down():
    job = manifest("rayjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert job["spec"]["entrypoint"].startswith("python -m jobs.summarize --input ")
    assert "--output " in job["spec"]["entrypoint"]
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert yaml.safe_load(job["spec"]["runtimeEnvYAML"])["working_dir"] == "/home/ray/trilemma"


@pytest.mark.parametrize("name", ["rayservice.yaml", "rayjob.yaml"])
def test_kuberay_worker_groups_mirror_the_launcher_node_types(name):
    groups = cluster_spec(manifest(name))["workerGroupSpecs"]
    workers = launcher_config.worker_types(LAUNCHER)
    assert [g["groupName"] for g in groups] == [n.removeprefix("ray.worker.").replace(".", "-") for n in workers]
    for group, (node_name, entry) in zip(groups, workers.items(), strict=True):
        pod = group["template"]["spec"]
        (container,) = pod["containers"]
        accelerators = {k: v for k, v in entry["resources"].items() if k.startswith("accelerator_type:")}
        # KubeRay's rayStartParams want the resources JSON inside a quoted string.
        assert json.loads(json.loads(group["rayStartParams"]["resources"])) == accelerators
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == entry["resources"]["GPU"]
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == entry["node_config"]["InstanceType"]
        capacity = "SPOT" if launcher_config.is_spot(entry) else "ON_DEMAND"
        assert pod["nodeSelector"]["eks.amazonaws.com/capacityType"] == capacity, node_name
        assert (group["minReplicas"], group["maxReplicas"]) == (entry["min_workers"], entry["max_workers"])


def test_cluster_plan_prints_the_choices_and_a_diff_and_writes_only_when_asked(tmp_path, capsys):
    launcher = tmp_path / "aws.yaml"
    launcher.write_text(LAUNCHER_TEXT)
    assert main(["cluster", "plan", "--launcher", str(launcher)]) == 0
    out = capsys.readouterr().out
    assert "pool long: needs 1 GPU x 80 GiB per replica, 0-4 replicas, on-demand only; A100-80G p4de.24xlarge" in out
    assert "+  ray.worker.a100-80g.on-demand:" in out and "-  ray.worker.h200.spot:" in out
    assert launcher.read_text() == LAUNCHER_TEXT
    assert main(["cluster", "plan", "--launcher", str(launcher), "--write"]) == 0
    written = launcher_config.parse(launcher.read_text())
    assert {n: e["max_workers"] for n, e in launcher_config.worker_types(written).items()} == {
        "ray.worker.a100-80g.on-demand": 1, "ray.worker.l4.spot": 4}
    capsys.readouterr()
    assert main(["cluster", "plan", "--launcher", str(launcher)]) == 0
    assert "already has these worker types" in capsys.readouterr().out


def test_cluster_plan_does_not_write_nodes_the_replicas_would_not_ask_for(tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "serve_app" / "configs" / "gpu-cluster.yaml").read_text())
    raw["pools"]["long"]["accelerator"] = "H200"   # 80 GiB fits the cheaper A100-80G
    config, launcher = tmp_path / "config.yaml", tmp_path / "aws.yaml"
    config.write_text(yaml.safe_dump(raw))
    launcher.write_text(LAUNCHER_TEXT)
    assert main(["cluster", "plan", "--config", str(config), "--launcher", str(launcher), "--write"]) == 2
    captured = capsys.readouterr()
    assert "pools.long.accelerator: H200 -> A100-80G" in captured.out
    assert "not written" in captured.err and launcher.read_text() == LAUNCHER_TEXT


def test_cluster_plan_names_the_limit_a_pool_passes(tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "serve_app" / "configs" / "gpu-cluster.yaml").read_text())
    raw["pools"]["long"]["gpu_memory_gib"] = 200
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["cluster", "plan", "--config", str(config)]) == 2
    assert ("pool long needs 1 GPU x 200 GiB per replica (200 GiB per GPU), more than any GPU of the catalog "
            "has: the largest is H200 with 141 GiB") in capsys.readouterr().err


def test_a_relative_config_path_is_found_under_the_project_from_any_directory(tmp_path, monkeypatch):
    # Serve builds the app in a task on the cluster, whose working directory is not the project.
    monkeypatch.chdir(tmp_path)
    assert TrilemmaConfig.from_yaml("serve_app/configs/gpu-cluster.yaml").pools["short"].accelerator == "L4"
    with pytest.raises(ConfigError, match="missing.yaml: cannot read config"):
        TrilemmaConfig.from_yaml("serve_app/configs/missing.yaml")
