"""`trilemma serve` with fake engines, for tests of how the serving process stops and for
benchmarks of the app's own path at an engine's pace: deploys the test config as its own app
(on the cluster named by RAY_ADDRESS, else on a Ray it starts), prints its URL, and serves
until SIGTERM or Ctrl-C, through the same code as `trilemma serve`.

    python -m tests.serve_fake_app --app trilemma --prefix / --port 8000 --ttft-s 0.03 --tpot-s 0.005

serves on :8000 as a GPU engine would pace a stream: 30 ms to the first token, 5 ms a token."""

from __future__ import annotations

import argparse
import sys
import threading

from core.config import TrilemmaConfig
from core.model_store import default_cache_dir, prepare_embedded_model
from serve_app.launcher import deploy_unless_stopped, serve_until_stopped
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--app", required=True, help="application name")
    parser.add_argument("--prefix", required=True, help="route prefix, e.g. /drain")
    parser.add_argument("--ttft-s", type=float, default=0.0, help="the fake engines' time to the first token")
    parser.add_argument("--tpot-s", type=float, default=0.0, help="the fake engines' time per token")
    parser.add_argument("--port", type=int, help="HTTP port (default: the test config's)")
    parser.add_argument("--routers", type=int, help="router replicas (default: the test config's)")
    parser.add_argument("--drain-timeout-s", type=float, default=30.0)
    parser.add_argument("--start-s", type=float, default=0.0, help="the fake engines' start time")
    args = parser.parse_args(argv)
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = args.app
    raw["router"]["drain_timeout_s"] = args.drain_timeout_s
    if args.routers:
        raw["router"]["replicas"] = args.routers
    if args.port:
        raw["http"]["port"] = args.port
    for pool in raw["pools"].values():
        pool.update(resources={"CPU": 0.1}, drain_timeout_s=args.drain_timeout_s, env={
            "TRILEMMA_FAKE_TTFT_S": str(args.ttft_s), "TRILEMMA_FAKE_TPOT_S": str(args.tpot_s),
            "TRILEMMA_FAKE_START_S": str(args.start_s)})
    config = TrilemmaConfig.from_dict(raw)
    print("starting", flush=True)
    stop = threading.Event()
    url = deploy_unless_stopped(config, stop=stop, engine_cls=FakeEngine,
                                model_source=str(prepare_embedded_model(default_cache_dir())), route_prefix=args.prefix)
    if url is None:
        print("stopped while starting", flush=True)
        return 0
    print(f"serving {url}", flush=True)
    asked = serve_until_stopped(config, stop)
    print("stopped" if asked else "stopped: the Ray cluster ended", flush=True)
    return 0 if asked else 1


if __name__ == "__main__":
    sys.exit(main())
