"""`make summarize-sample`: the job on the sample corpus, through the app at --url when one
answers there, else through one started here on the given config (the embedded model by
default) and stopped afterwards. Run it again and it resumes: nothing done is redone.

    python -m jobs.summarize.sample_run [--url URL] [--config FILE] [--out DIR] [--count N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

from core.config import DEFAULT_CONFIG_PATH, TrilemmaConfig
from jobs.summarize.cli import main as summarize
from jobs.summarize.sample_corpus import write_sample


def app_answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/models", timeout=5).status_code in (200, 401)
    except httpx.HTTPError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an app already serving (default: the config's http address)")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="app config, if one must be started")
    parser.add_argument("--port", type=int, help="override the config's http.port")
    parser.add_argument("--out", default="build/summarize-sample", help="folder for the corpus and the summaries")
    parser.add_argument("--count", type=int, help="sample documents (default: all 12, three of them long)")
    parser.add_argument("--max-tokens", type=int, default=64, help="longest summary, in tokens")
    args, job_args = parser.parse_known_args(argv)  # the rest goes to the job as it is
    config = TrilemmaConfig.from_yaml(args.config)
    if args.port:
        config = config.model_copy(update={"http": config.http.model_copy(update={"port": args.port})})
    url = args.url or f"http://{config.http.host}:{config.http.port}"
    out = Path(args.out).resolve()
    corpus = write_sample(out / "corpus.jsonl", args.count)
    job = ["--input", str(corpus), "--output", str(out / "summaries.jsonl"), "--max-tokens", str(args.max_tokens),
           *job_args]
    if app_answers(url):
        print(f"using the app at {url}", flush=True)
        return summarize([*job, "--url", url])
    from serve_app.launcher import deploy, shutdown_local_ray

    print(f"no app at {url}: starting one with {args.config} (minutes on a CPU: the engines compile)", flush=True)
    started = time.monotonic()
    try:
        url = deploy(config)
        print(f"app ready at {url} after {time.monotonic() - started:.0f} s", flush=True)
        # The job joins the Ray this process started for the app.
        return summarize([*job, "--url", url])
    finally:
        shutdown_local_ray()


if __name__ == "__main__":
    sys.exit(main())
