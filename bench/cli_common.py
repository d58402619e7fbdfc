"""What the benchmark commands share: the app's config and its overrides, the API key,
where results go, and how a command is recorded in them."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from core.config import DEFAULT_CONFIG_PATH, TrilemmaConfig
from core.config_base import parse_overrides

RESULTS_DIR = Path("bench/results")


def add_api_key_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-key", default=os.environ.get("TRILEMMA_API_KEY"),
                        help="sent as 'Authorization: Bearer'; default: $TRILEMMA_API_KEY")


def add_app_args(parser: argparse.ArgumentParser, default_config: Path = DEFAULT_CONFIG_PATH) -> None:
    """For commands that deploy the app themselves: its config, and the key its requests carry."""
    parser.add_argument("--config", type=Path, default=default_config, help="the app's config")
    parser.add_argument("--set", action="append", default=[], metavar="DOTTED.KEY=VALUE",
                        help="override one config key (the value is read as YAML); repeatable, e.g. "
                             "--set model.source=/models/smol --set pools.short.max_num_seqs=64")
    add_api_key_arg(parser)


def app_config(args: argparse.Namespace) -> TrilemmaConfig:
    """`--config` with every `--set` applied, validated like the file itself."""
    return TrilemmaConfig.from_yaml(args.config).with_overrides(parse_overrides(args.set), source="--set")


def add_output_args(parser: argparse.ArgumentParser, default_name: str) -> None:
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder")
    parser.add_argument("--name", help=f"results file name (default: {default_name}-<time>)")
    parser.add_argument("--no-progress", action="store_true")


def fail(error: Exception) -> int:
    print(f"trilemma bench: {error}", file=sys.stderr)
    return 2


def shown_path(path: Path) -> str:
    """A path as results show it: relative to the working directory when inside it, so stored
    results name no machine's folders."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return _home_as_tilde(str(path))


def _home_as_tilde(text: str) -> str:
    """A path under the home folder as `~/...`: results name no machine's folders."""
    home = str(Path.home())
    return "~/" + text[len(home) + 1:] if home != "/" and text.startswith(home + "/") else text


def _quoted(word: str) -> str:
    """A word of the command as a shell reads it back: quoted, a leading `~/` left outside the
    quotes so that the shell still expands it."""
    shown = _home_as_tilde(word)
    return "~/" + shlex.quote(shown[2:]) if shown.startswith("~/") else shlex.quote(shown)


def command_line(args: argparse.Namespace) -> str:
    """The command as typed, for the results file, with any API key masked."""
    argv = list(args.argv)
    for index, word in enumerate(argv):
        if word == "--api-key" and index + 1 < len(argv):
            argv[index + 1] = "***"
        elif word.startswith("--api-key="):
            argv[index] = "--api-key=***"
    return "trilemma " + " ".join(_quoted(word) for word in argv)
