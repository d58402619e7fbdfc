"""`python -m jobs.summarize`: flags over the config file, the run, the report, an exit code.

Exit codes: 0 every document settled; 1 some failed (they are retried by the next run) or the
run stopped early; 2 a bad config or input (nothing was sent); 130 interrupted (Ctrl-C,
`ray job stop`): what finished is recorded, and the same command finishes the rest.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from core.config_base import ConfigError, parse_overrides
from core.storage import StorageError
from jobs.summarize.config import SummarizeConfig
from jobs.summarize.inputs import InputError
from jobs.summarize.outputs import OutputFormatError
from jobs.summarize.serve_client import AppUnavailable

# Flag -> dotted config key; a flag given on the command line wins over the file.
FLAG_KEYS = {
    "input": "input.uri", "input_format": "input.format", "on_invalid": "input.on_invalid",
    "output": "output.uri", "output_format": "output.format", "state": "output.state_uri",
    "mode": "mode", "url": "serve.url", "scenario": "serve.scenario", "pool": "serve.pool",
    "model": "model.source", "adapter": "model.adapter", "prompt_template": "prompt.template",
    "max_tokens": "prompt.max_tokens",
    "context_tokens": "chunking.context_tokens", "chunk_tokens": "chunking.chunk_tokens",
    "overlap_tokens": "chunking.overlap_tokens", "max_concurrency": "concurrency.max",
    "s3_endpoint_url": "s3.endpoint_url",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.summarize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML config (jobs/summarize/configs/default.yaml shows every key)")
    p.add_argument("--input", help="JSONL or Parquet file, or a folder of .txt/.md files; path or s3:// URI")
    p.add_argument("--input-format", choices=["auto", "jsonl", "parquet", "folder"])
    p.add_argument("--on-invalid", choices=["stop", "skip"], help="bad input lines: stop before sending, or skip them")
    p.add_argument("--output", help="output .jsonl or .parquet; path or s3:// URI")
    p.add_argument("--output-format", help="jsonl or parquet (default: by the output's suffix)")
    p.add_argument("--state", help="results folder a rerun resumes from (default: <output>.parts)")
    p.add_argument("--mode", choices=["serve", "engine"], help="through the running app, or own engines")
    p.add_argument("--url", help="the app's base URL (serve mode)")
    p.add_argument("--scenario", help="scenario of the requests (default: batch, the lowest priority)")
    p.add_argument("--pool", help="pin every request to this pool")
    p.add_argument("--api-key", help="API key for the app (default: $TRILEMMA_API_KEY)")
    p.add_argument("--model", help="model source: its tokenizer chunks; engine mode loads its weights")
    p.add_argument("--adapter", help="a LoRA adapter the app serves: every request names it (serve mode)")
    p.add_argument("--prompt-template", help="user message; {text} is replaced by the document or chunk")
    p.add_argument("--max-tokens", type=int, help="longest summary, in tokens")
    p.add_argument("--context-tokens", type=int, help="tokens a request may use in all")
    p.add_argument("--chunk-tokens", type=int, help="tokens of text per chunk (default: all that fit)")
    p.add_argument("--overlap-tokens", type=int, help="tokens a chunk repeats from the one before")
    p.add_argument("--max-concurrency", type=int, help="cap on requests in flight")
    p.add_argument("--s3-endpoint-url", help="S3-compatible endpoint (default: $AWS_ENDPOINT_URL)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config key, dotted (e.g. concurrency.initial=4); repeatable")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def load_config(args: argparse.Namespace) -> SummarizeConfig:
    config = SummarizeConfig.from_yaml(args.config) if args.config else SummarizeConfig()
    overrides: dict[str, Any] = {key: getattr(args, flag) for flag, key in FLAG_KEYS.items()
                                 if getattr(args, flag) is not None}
    overrides.update(parse_overrides(args.set))
    if args.no_progress:
        overrides["progress"] = False
    return config.with_overrides(overrides) if overrides else config


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("jobs").setLevel(logging.INFO)
    from jobs.summarize.job import run
    from serve_app.ray_driver import interrupt_on_sigterm

    try:
        config = load_config(args)
        interrupt_on_sigterm()
        report = run(config, api_key=args.api_key)
    except (AppUnavailable, ConfigError, InputError, OutputFormatError, StorageError) as error:
        print(f"summarize: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the first document: nothing to record
        print("summarize: interrupted before any document was sent", file=sys.stderr)
        return 130
    print(report.render(), flush=True)
    if report.interrupted:
        return 130
    return 1 if (report.error or report.failed) else 0
