"""The `trilemma` command line: serve, prepare the model, check a config, benchmark, plan a cluster."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import threading
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable

from core.config import DEFAULT_CONFIG_PATH, ConfigError, TrilemmaConfig
from core.config_base import parse_overrides
from core.model_store import resolve_model_source
from router.model_choice import ModelChoice
from serve_app.autoscale_cli import add_commands as add_autoscale_commands
from serve_app.cluster_cli import add_commands as add_cluster_commands
from serve_app.cost_cli import add_commands as add_cost_commands
from serve_app.observe_cli import add_commands as add_observe_commands

# Commands other parts of the project add without this module importing them (`trilemma
# bench` is the benchmark's): each entry point is an `add_commands(subparsers)`.
COMMAND_GROUP = "trilemma.commands"


def main(argv: list[str] | None = None, plugins: list[Callable] | None = None) -> int:
    """`plugins`: the `add_commands` of other parts; default: the installed entry points."""
    parser = argparse.ArgumentParser(prog="trilemma", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="prepare the model and serve the app")
    serve_cmd.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config")
    serve_cmd.add_argument("--port", type=int, help="override http.port")
    serve_cmd.add_argument("--set", action="append", default=[], metavar="DOTTED.KEY=VALUE",
                           help="override one config key (the value is read as YAML); repeatable, "
                                "e.g. --set router.replicas=2")
    serve_cmd.set_defaults(func=_serve)
    prepare = commands.add_parser("prepare-model", help="fetch and convert the configured model")
    prepare.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config")
    prepare.set_defaults(func=_prepare_model)
    check = commands.add_parser("check-config", help="validate a config and print it")
    check.add_argument("config", help="YAML config")
    check.set_defaults(func=_check_config)
    reference = commands.add_parser("config-reference", help="write the configuration reference (markdown)")
    reference.add_argument("--out", help="file to write (docs/configuration.md); default: print it")
    reference.set_defaults(func=_config_reference)
    tenants = commands.add_parser("tenants", help="API keys and daily budgets")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True)
    add = tenant_commands.add_parser("add", help="add a tenant (or give it a new key); prints the key once")
    add.add_argument("name")
    add.add_argument("--file", required=True, help="the tenants YAML (the config's tenants.keys_file)")
    add.add_argument("--daily-budget-usd", type=float, help="most the tenant may spend per UTC day")
    add.add_argument("--default-adapter", help="the LoRA adapter of the tenant's requests that name no model")
    add.set_defaults(func=_add_tenant)
    for add_plugin_commands in plugins if plugins is not None else _installed_plugins():
        add_plugin_commands(commands)
    add_cost_commands(commands)
    add_autoscale_commands(commands)
    add_cluster_commands(commands)
    add_observe_commands(commands)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.argv = argv  # results record the command that made them
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the output
    try:
        return args.func(args)
    except ConfigError as error:
        print(f"trilemma: {error}", file=sys.stderr)
        return 2


def _installed_plugins() -> list[Callable]:
    """Each entry point's `add_commands`; one that cannot be imported (its extra is not
    installed) becomes a command that says so, and the others still work."""
    found = []
    for plugin in entry_points(group=COMMAND_GROUP):
        try:
            found.append(plugin.load())
        except ImportError as error:
            found.append(functools.partial(_add_unavailable_command, plugin.name, error))
    return found


def _add_unavailable_command(name: str, error: ImportError, commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(name, help=f"unavailable here: {error}")
    command.add_argument("rest", nargs=argparse.REMAINDER)

    def explain(args: argparse.Namespace) -> int:
        print(f"trilemma {name}: cannot load ({error}); install the project's `{name}` extra: "
              f"pip install -e '.[{name}]'", file=sys.stderr)
        return 2

    command.set_defaults(func=explain)


def _add_tenant(args: argparse.Namespace) -> int:
    from router.tenants import add_tenant

    key = add_tenant(args.file, args.name, args.daily_budget_usd, args.default_adapter)
    print(f"tenant {args.name!r} added to {args.file}; its API key (stored only as a hash):\n{key}")
    return 0


def _check_config(args: argparse.Namespace) -> int:
    print(TrilemmaConfig.from_yaml(args.config).model_dump_json(indent=2))
    return 0


def _config_reference(args: argparse.Namespace) -> int:
    from core.config_reference import config_reference

    text = config_reference()
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0


def _prepare_model(args: argparse.Namespace) -> int:
    for spec in TrilemmaConfig.from_yaml(args.config).models.values():
        print(resolve_model_source(spec.source))
    return 0


def _serve(args: argparse.Namespace) -> int:
    started = time.monotonic()
    from serve_app.launcher import deploy_unless_stopped, serve_until_stopped

    config = TrilemmaConfig.from_yaml(args.config).with_overrides(parse_overrides(args.set), source="--set")
    if args.port:
        config = config.model_copy(update={"http": config.http.model_copy(update={"port": args.port})})
    for spec in config.models.values():
        print(f"model {spec.name} ready in {time.monotonic() - started:.0f} s: "
              f"{resolve_model_source(spec.source)}", flush=True)
    stop = threading.Event()
    url = deploy_unless_stopped(config, stop=stop)
    if url is None:
        print("stopped while starting", flush=True)
        return 0
    try:
        _announce(config, url, started)
    except KeyboardInterrupt:  # Ctrl-C as the app became ready: the stop, drained as any other
        stop.set()
    if not serve_until_stopped(config, stop):
        print("stopped: the Ray cluster it ran on has ended", flush=True)
        return 1
    print("stopped", flush=True)
    return 0


def _announce(config: TrilemmaConfig, url: str, started: float) -> None:
    """Where the app serves, with a request that works as it is (what the default scenario serves)."""
    first_model = (ModelChoice(config).allowed(config.scenarios[config.routing.default_scenario])
                   or [config.default_model])[0]
    print(
        f"\nTrilemma is serving {', '.join(config.models)} at {url}/v1 "
        f"(ready {time.monotonic() - started:.0f} s after start; Ctrl-C or SIGTERM drains and stops it)\n"
        f"  curl {url}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d '{{\"model\": \"{first_model}\", \"messages\": [{{\"role\": \"user\", "
        f"\"content\": \"Hello!\"}}]}}'\n",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
