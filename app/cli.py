"""`quota-streams`: one console command, a subcommand per tool.

Each subcommand lives in `app.commands.<name>` with `register(subparsers)` and `run(args)`.
Errors a user can act on (`UserError`, `SettingsError`) print one line and exit 2; nothing a
user did wrong ends in a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from app.errors import UserError
from app.gc_tuning import tune_gc
from app.settings import SettingsError

__all__ = ["build_parser", "main"]

COMMANDS = ("replay", "worker", "gateway", "demo", "broker", "produce", "directives", "quotas",
            "simulate", "audit", "explain")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quota-streams",
        description="Cluster-wide, replayable, explainable Kafka quotas on Faust.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"app.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"app.commands.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    tune_gc()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (UserError, SettingsError) as exc:
        print(f"quota-streams {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
