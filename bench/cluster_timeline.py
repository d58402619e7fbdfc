"""Ray's autoscaler against the cluster plan, on one machine: nodes by type over time as pool
replicas come and go on Ray's fake multi-node provider.

    python -m bench.cluster_timeline [--config serve_app/configs/gpu-cluster.yaml]
        [--peak short=2,long=2] [--idle-timeout-min 0.25] [--out bench/results]

The plan is made for the config's pools with their autoscaling maxima set to the peak; its
worker types become the fake cluster's (same names, GPUs and accelerator labels, one CPU
each). Each pool is a Serve deployment holding exactly the placement group Ray Serve LLM
builds for the pool's real replica, so the autoscaler sees the real demand. Phases: nothing,
the first pool's first replica, every pool at its peak, then every replica gone, until the
idle workers are removed. Writes cluster-fake-autoscaler.{json,md,png} with the command.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.fake_cluster import CLIENT_ENV, FakeCluster, ReplicaStandIn, fake_worker_types, free_port, wait_until
from cluster import launcher_config
from cluster.node_types import gpu_node_types
from cluster.plan import ClusterPlan, plan_cluster
from cluster.pool_needs import pool_needs
from cluster.pricing import load_catalog
from core.config import PROJECT_ROOT, TrilemmaConfig
from core.upstream import autoscaler_report

NAME = "cluster-fake-autoscaler"
SAMPLE_INTERVAL_S = 0.5
# Launching a fake node takes seconds; on a loaded 2-core machine, let it take a minute.
LAUNCH_TIMEOUT_S = 120


def peak_config(config: TrilemmaConfig, peak: dict[str, int]) -> TrilemmaConfig:
    """The config with each named pool scaling from zero to its peak."""
    raw = config.model_dump()
    raw["autoscaling"]["enabled"] = True
    for pool, replicas in peak.items():
        raw["autoscaling"]["pools"][pool] = {"min_replicas": 0, "max_replicas": replicas}
    return TrilemmaConfig.from_dict(raw, source="timeline config")


def make_plan(config: TrilemmaConfig) -> ClusterPlan:
    catalog = load_catalog(config.costs)
    launcher = launcher_config.parse(launcher_config.DEFAULT_LAUNCHER_PATH.read_text())
    return plan_cluster(pool_needs(config), gpu_node_types(catalog), launcher_config.head_node(launcher, catalog))


def planned_worker_types(plan: ClusterPlan) -> dict[str, dict[str, Any]]:
    """The plan's worker types as `cluster plan --write` puts them into the launcher config."""
    return {p.node_type.name: launcher_config.worker_entry(p.node_type, p.min_workers, p.max_workers)
            for p in plan.node_types}


def pool_deployment_options(config: TrilemmaConfig, pool: str) -> dict[str, Any]:
    """The placement group Ray Serve LLM gives this pool's replica (needs a connected Ray)."""
    from core.wire import deployment_name
    from pool.deployment import llm_config_for_pool
    from pool.replica import PoolServer

    llm_config = llm_config_for_pool(pool, config.pools[pool], config.pool_model(pool), "stand-in")
    options = PoolServer.get_deployment_options(llm_config)
    return {"name": deployment_name(pool), "placement_group_bundles": options["placement_group_bundles"],
            "placement_group_strategy": options["placement_group_strategy"],
            "ray_actor_options": {key: options["ray_actor_options"].get(key, 0) for key in ("num_cpus", "num_gpus")}}


class Recorder:
    """Samples, every half second, the autoscaler's nodes by type and each pool's replicas.

    `serve_api` is held around every Serve call of the sampling thread; the thread that
    deploys must hold it too. Building Serve's config models (as `serve.status()` and
    `serve.deployment()` both do) registers, dumps and unregisters Serve's request-router
    module in cloudpickle's process-wide registry, so two threads doing it at once make one
    unregister what the other already had: `ValueError: <module
    'ray.serve._private.request_router'> is not registered for pickle by value`.
    """

    def __init__(self, pools: list[str]) -> None:
        self.pools = pools
        self.serve_api = threading.Lock()
        self.samples: list[dict[str, Any]] = []
        self.phases: list[dict[str, Any]] = []
        self.target = {pool: 0 for pool in pools}
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> float:
        return round(time.monotonic() - self._started, 2)

    def phase(self, name: str, target: dict[str, int]) -> None:
        self.target.update(target)
        self.phases.append({"t": self.now(), "phase": name, "target": dict(self.target)})
        print(f"[{self.now():6.1f}s] {name}: target {self.target}", flush=True)

    def start(self) -> None:
        self._started = time.monotonic()  # the timeline starts with the empty cluster
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def latest(self) -> dict[str, Any]:
        return self.samples[-1] if self.samples else {"nodes": {}, "running": {}}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.serve_api:
                    observed = _observe(self.pools)
                self.samples.append({"t": self.now(), "target": dict(self.target), **observed})
            except Exception as error:  # a sample lost to a busy GCS is no reason to stop
                print(f"sample failed: {error}", file=sys.stderr)
            self._stop.wait(SAMPLE_INTERVAL_S)


def _observe(pools: list[str]) -> dict[str, Any]:
    from ray import serve

    from core.wire import deployment_name

    report = autoscaler_report()
    nodes = {name: count for name, count in (report.get("active_nodes") or {}).items() if not name.startswith("ray.head")}
    pending = dict(report.get("pending_launches") or {})
    for _, node_type, _ in report.get("pending_nodes") or []:
        pending[node_type] = pending.get(node_type, 0) + 1
    running = {}
    for pool in pools:
        app = serve.status().applications.get(pool)
        deployment = app.deployments.get(deployment_name(pool)) if app else None
        running[pool] = sum(n for state, n in (deployment.replica_states if deployment else {}).items()
                            if str(getattr(state, "value", state)) == "RUNNING")
    return {"nodes": nodes, "pending": pending, "running": running}


def run_timeline(config: TrilemmaConfig, peak: dict[str, int], idle_timeout_min: float) -> dict[str, Any]:
    """The scenario on a fresh fake cluster, stopped at the end whatever happens."""
    import ray
    from ray import serve

    from serve_app.ray_driver import init_ray

    plan = make_plan(peak_config(config, peak))
    workers = planned_worker_types(plan)
    cluster = FakeCluster(fake_worker_types(workers), idle_timeout_minutes=idle_timeout_min)
    os.environ.update(CLIENT_ENV)
    pools = list(peak)
    recorder = Recorder(pools)
    options: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        address = cluster.start(extra_env={"PYTHONPATH": str(PROJECT_ROOT)})
        init_ray(address=address, logging_level="ERROR", log_to_driver=False)
        # Proxies on the fake nodes would all bind one port of this one machine.
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": free_port()})
        options.update({pool: pool_deployment_options(config, pool) for pool in pools})
        recorder.start()

        def deploy(replicas: dict[str, int]) -> None:
            """All pools at once, not waiting for them: the recorder watches them come up."""
            with recorder.serve_api:
                serve.run_many([
                    serve.RunTarget(target=serve.deployment(ReplicaStandIn).options(num_replicas=count, **options[pool]).bind(),
                                    name=pool, route_prefix=None)
                    for pool, count in replicas.items()
                ], wait_for_applications_running=False)

        def replicas_running(target: dict[str, int]) -> bool:
            return recorder.latest()["running"] == {**recorder.latest()["running"], **target}

        recorder.phase("idle", {})
        time.sleep(3)
        first = pools[0]
        recorder.phase(f"{first}: 1 replica", {first: 1})
        deploy({first: 1})
        wait_until(lambda: replicas_running({first: 1}), LAUNCH_TIMEOUT_S)
        recorder.phase("peak", dict(peak))
        deploy(peak)
        wait_until(lambda: replicas_running(peak), LAUNCH_TIMEOUT_S)
        time.sleep(3)
        recorder.phase("demand ends", {pool: 0 for pool in pools})
        with recorder.serve_api:
            for pool in pools:
                serve.delete(pool, _blocking=False)
        floor = {p.node_type.name: p.min_workers for p in plan.node_types}
        wait_until(lambda: {k: v for k, v in recorder.latest()["nodes"].items() if v} ==
                   {k: v for k, v in floor.items() if v}, idle_timeout_min * 60 + LAUNCH_TIMEOUT_S)
        time.sleep(2)
        recorder.phase("done", {})
    finally:
        recorder.stop()
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            cluster.stop()
    return {
        "plan": {"report": plan.report(), "worker_types": workers,
                 "pools_by_type": {p.node_type.name: p.pools for p in plan.node_types}},
        "replica_bundles": {pool: options[pool]["placement_group_bundles"] for pool in options},
        "peak": peak, "idle_timeout_minutes": idle_timeout_min,
        "wall_s": round(time.monotonic() - started, 1), "cpu_cores": os.cpu_count(),
        "phases": recorder.phases, "samples": recorder.samples,
    }


def events(result: dict[str, Any]) -> dict[str, Any]:
    """Per node type: the most nodes, how long after its pools asked for replicas the first
    node came up, and how long after its pools' last replica went the last node went (the
    idle timeout plus the autoscaler's reaction)."""
    samples, phases = result["samples"], result["phases"]
    ends = next((p["t"] for p in phases if p["phase"] == "demand ends"), None)
    found: dict[str, Any] = {}
    for node_type, pools in result["plan"]["pools_by_type"].items():
        counts = [(s["t"], s["nodes"].get(node_type, 0)) for s in samples]
        most = max((count for _, count in counts), default=0)
        first_up = next((t for t, count in counts if count > 0), None)
        asked = next((s["t"] for s in samples if any(s["target"].get(pool, 0) for pool in pools)), None)
        idle_since = next((s["t"] for s in samples if ends is not None and s["t"] >= ends
                           and not any(s["running"].get(pool, 0) for pool in pools)), None)
        gone = next((t for t, count in counts if idle_since is not None and t >= idle_since and count == 0), None)
        found[node_type] = {
            "pools": pools, "most_nodes": most,
            "up_after_asked_s": _between(asked, first_up), "replicas_gone_at_s": idle_since,
            "gone_after_replicas_s": _between(idle_since, gone),
        }
    return found


def _between(start: float | None, end: float | None) -> float | None:
    return round(end - start, 1) if start is not None and end is not None else None


def changes(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The samples at which anything changed: the timeline people read."""
    rows, last = [], None
    for sample in result["samples"]:
        key = json.dumps([sample["target"], sample["running"], sample["nodes"], sample["pending"]], sort_keys=True)
        if key != last:
            rows.append(sample)
            last = key
    return rows


def write_outputs(result: dict[str, Any], out_dir: Path) -> list[Path]:
    from bench.result_files import write_json

    result["events"] = events(result)
    json_path = write_json(result, out_dir, NAME)
    png_path = out_dir / f"{NAME}.png"
    plot_timeline(result, png_path)
    md_path = out_dir / f"{NAME}.md"
    md_path.write_text(markdown(result, png_path.name))
    return [json_path, md_path, png_path]


def markdown(result: dict[str, Any], png_name: str) -> str:
    def counts(values: dict[str, int]) -> str:
        return ", ".join(f"{name} {count}" for name, count in sorted(values.items()) if count) or "-"

    lines = [
        f"# {NAME}", "", f"Command: `{result['command']}`", "",
        "Ray's autoscaler (v1, fake multi-node provider) on one machine, with the worker types that "
        "`trilemma cluster plan` chose for the pools below; each pool replica is a Serve deployment "
        "holding the placement group Ray Serve LLM builds for the real replica. "
        f"Idle timeout {result['idle_timeout_minutes']:g} min; peak replicas {result['peak']}; "
        f"{result.get('cpu_cores')} CPU cores; wall time {result['wall_s']:.0f} s, cluster start and stop included.", "", "## Plan", "", "```", *result["plan"]["report"], "```", "",
        "## Events", "", "| node type | pools | most nodes | first node up after its pools asked (s) "
        "| last node gone after their replicas (s) |", "| --- | --- | --- | --- | --- |",
    ]
    for node_type, event in result["events"].items():
        lines.append(f"| {node_type} | {', '.join(event['pools'])} | {event['most_nodes']} "
                     f"| {event['up_after_asked_s']} | {event['gone_after_replicas_s']} |")
    lines += ["", f"![timeline]({png_name})", "", "## Timeline (samples where anything changed)", "",
              "| t (s) | target replicas | running replicas | nodes by type | launching |",
              "| --- | --- | --- | --- | --- |"]
    phase_at = {p["t"]: p["phase"] for p in result["phases"]}
    for row in changes(result):
        lines.append(f"| {row['t']:.1f} | {counts(row['target'])} | {counts(row['running'])} "
                     f"| {counts(row['nodes'])} | {counts(row['pending'])} |")
    lines += ["", "Phases: " + "; ".join(f"{t:.1f} s {name}" for t, name in phase_at.items()), ""]
    return "\n".join(lines)


def plot_timeline(result: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    times = [s["t"] for s in samples]
    fig, (nodes_ax, replicas_ax) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5))
    # A node type and the pools it serves share a color.
    colors = {}
    for index, (node_type, pools) in enumerate(result["plan"]["pools_by_type"].items()):
        colors[node_type] = f"C{index}"
        colors.update({pool: f"C{index}" for pool in pools})
        nodes_ax.step(times, [s["nodes"].get(node_type, 0) for s in samples], where="post", label=node_type,
                      color=colors[node_type])
    nodes_ax.set_ylabel("nodes (autoscaler)")
    for pool in result["peak"]:
        replicas_ax.step(times, [s["running"].get(pool, 0) for s in samples], where="post",
                         color=colors.get(pool), label=f"{pool} running")
        replicas_ax.step(times, [s["target"].get(pool, 0) for s in samples], where="post", linestyle="--",
                         color=colors.get(pool), alpha=0.5, label=f"{pool} asked")
    replicas_ax.set_ylabel("pool replicas")
    replicas_ax.set_xlabel("seconds")
    for axis in (nodes_ax, replicas_ax):
        for phase in result["phases"]:
            axis.axvline(phase["t"], color="grey", linewidth=0.6, linestyle=":")
        axis.legend(loc="upper left", fontsize=8)
        axis.yaxis.get_major_locator().set_params(integer=True)
    nodes_ax.set_title(f"Ray autoscaler on the planned node types (idle timeout {result['idle_timeout_minutes']:g} min)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=Path("serve_app/configs/gpu-cluster.yaml"))
    parser.add_argument("--peak", default="short=2,long=2", help="replicas per pool at peak: POOL=N,...")
    parser.add_argument("--idle-timeout-min", type=float, default=0.25)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    # A test or a shell that stops this run with SIGTERM still gets the fake cluster stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    peak = {pool: int(count) for pool, count in (item.split("=") for item in args.peak.split(","))}
    result = run_timeline(TrilemmaConfig.from_yaml(args.config), peak, args.idle_timeout_min)
    result["command"] = " ".join(["python -m bench.cluster_timeline", *(argv if argv is not None else sys.argv[1:])])
    for path in write_outputs(result, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
