"""Argument parsing and error handling for ``turbo-physai``; the commands live in
:mod:`.commands` and :mod:`.run`."""

from __future__ import annotations

import argparse
import os
import sys

from . import commands, demo, run
from .needs import Unavailable

OK, FINDINGS, USAGE = 0, 1, 2
#: stdout's reader went away (``| head``): the status of a process killed by SIGPIPE.
BROKEN_PIPE = 141
CONFIG_HELP = "a config file, or a config ID (turbo-physai list --configs)"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="turbo-physai",
        description="Declared, checked, reversible runtime optimizations for PyTorch models.",
        epilog="Exit status: 0 ok, 1 findings (check/diff/demo), 2 usage or config error or "
        "something missing, 86 activation failed (run). See docs/cli.md.",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    trust = argparse.ArgumentParser(add_help=False)
    trust.add_argument(
        "--trust-config",
        action="store_true",
        help="let the config import catalogs that are not installed",
    )
    select = argparse.ArgumentParser(add_help=False)
    select.add_argument(
        "--force-group",
        action="append",
        default=[],
        metavar="G",
        help="apply G even if its evidence/dependency/dirty-tree checks fail",
    )
    select.add_argument("--disable-group", action="append", default=[], metavar="G", help="skip G")

    p = sub.add_parser(
        "list",
        parents=[out],
        help="catalogs (their host libraries here) and groups, and whether each would apply here",
    )
    p.add_argument(
        "--configs", action="store_true", help="the config IDs to name instead of a config file"
    )
    p.set_defaults(func=commands.list_groups)

    p = sub.add_parser(
        "generate",
        parents=[out, trust],
        help="write a config for groups, with evidence from the code here",
    )
    p.add_argument("groups", nargs="*", metavar="GROUP", help="group IDs to select")
    p.add_argument(
        "--recipe", help="a config whose selection, options, model and compatibility to start from"
    )
    p.add_argument("-o", "--output", required=True, help="YAML file to write")
    p.add_argument(
        "--id", help="metadata.id (default: the recipe's, else the output file's name, no .yaml)"
    )
    p.add_argument("--version", help="metadata.version (default: the recipe's, else 0.1.0)")
    p.add_argument("--model", help="model.name")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=commands.generate)

    p = sub.add_parser(
        "check",
        parents=[out, trust, select],
        help="check a config (or a RuntimeConfig) against the code here; install nothing",
    )
    p.add_argument("config", help=CONFIG_HELP)
    p.add_argument("--report", metavar="FILE", help="also write the JSON report to FILE")
    p.set_defaults(func=commands.check)

    p = sub.add_parser("show", parents=[out], help="print a config with extends expanded")
    p.add_argument("config", help=CONFIG_HELP)
    p.set_defaults(func=commands.show)

    p = sub.add_parser("diff", parents=[out], help="compare two configs (exit 1 if they differ)")
    p.add_argument("old", help=CONFIG_HELP)
    p.add_argument("new", help=CONFIG_HELP)
    p.set_defaults(func=commands.diff)

    p = sub.add_parser("report", parents=[out], help="render a saved JSON report")
    p.add_argument("file", help="report.json of run, or a check/apply report")
    p.set_defaults(func=commands.report)

    p = sub.add_parser("kernels", parents=[out], help="active kernel per operation slot")
    p.set_defaults(func=commands.kernels)

    p = sub.add_parser(
        "demo",
        help="the main job: optimize a small random-init Deformable DETR, compare, roll back",
    )
    p.add_argument("--device", help="cpu or cuda (default: cuda when present, else cpu)")
    p.add_argument(
        "--reps", type=int, default=10, help="alternating timed rounds (default: %(default)s)"
    )
    p.add_argument("--quick", action="store_true", help="a tiny model and 3 runs (for tests)")
    p.add_argument("--plot", metavar="PNG", help="also draw the timings (needs matplotlib)")
    p.add_argument(
        "--workdir", help="where to keep the generated config (default: a temporary folder)"
    )
    p.set_defaults(func=demo.demo)

    p = sub.add_parser(
        "run",
        parents=[trust, select],
        help="run a command with the config applied in every Python process",
        usage="turbo-physai run [options] -- COMMAND [ARGS ...]",
    )
    p.add_argument(
        "--config",
        help="OptimizationConfig file or ID to apply (none: only RuntimeConfig and reports)",
    )
    p.add_argument("--runtime-config", help="RuntimeConfig: environment, CPU and NUMA placement")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable of the command (after the RuntimeConfig)")
    p.add_argument("--disable-numa", action="store_true",
                   help="no NUMA binding this time, whatever the RuntimeConfig says")
    p.add_argument(
        "--report-dir",
        default="turbophysai_reports",
        help="where every process writes its report (default: %(default)s)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    p.set_defaults(func=run.run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except (ValueError, FileExistsError, Unavailable) as err:
        # ValueError: ConfigError (incl. CatalogError, GenerateError), DeclarationError, the
        # planner's PlanError and the engine's usage errors (unknown --force-group ...).
        # Unavailable: a module or device the command needs is missing (named, with the fix).
        print(f"turbo-physai {args.command}: error: {err}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:
        # Python would report the failed flush of stdout again at exit: point it at devnull.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
