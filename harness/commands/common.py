"""What several subcommands share: how a subcommand's parser is made (description and examples),
what a path on the command line is (a run or a study: decided here, once), and the study
executor flags of `bench run` and `bench validate`."""

from __future__ import annotations

import argparse
import re
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.core.errors import UserError

if TYPE_CHECKING:
    from harness.core.overrides import Override

EXIT_OK, EXIT_USAGE, EXIT_ENGINE, EXIT_INTERRUPTED = 0, 2, 3, 130  # 1: a regression (harness.derive.gates)
RUN_RECORD = "regime.json"  # what makes a directory a run (the study's marker: harness.results.study.record)

Kind = Literal["run", "study"]


def subcommand(
    subparsers: Any, name: str, *, summary: str, description: str, examples: str
) -> argparse.ArgumentParser:
    """A subcommand's parser: ``summary`` for the list in ``bench --help``, the description wrapped
    to the terminal, and the examples kept line by line (RawDescriptionHelpFormatter keeps both as
    given, so the description is wrapped here, paragraph by paragraph)."""
    width = min(shutil.get_terminal_size().columns, 100) - 2
    paragraphs = textwrap.dedent(description).strip().split("\n\n")
    return subparsers.add_parser(
        name,
        help=summary,
        description="\n\n".join(_fill(paragraph, width) for paragraph in paragraphs),
        epilog="Examples:\n" + textwrap.indent(textwrap.dedent(examples).strip("\n"), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


METRICS_PAGE = "docs/metrics.md"  # every metric's definition, written from the registry (metrics_page)


def metrics_page() -> str:
    """docs/metrics.md: the registry's metrics (``harness.core.metrics``), one row each, so no help
    text or page restates a formula; ``tests/test_docs.py`` checks the page is this."""
    from harness.core.metrics import METRICS

    rows = "\n".join(
        f"| `{name}` | {m.unit} | {m.direction} | {'yes' if m.gated else ''} | {m.description} |"
        for name, m in METRICS.items()
    )
    return (
        "# Every metric\n\n"
        "Written from the registry (`harness.core.metrics`; `BENCH_UPDATE_DOCS=1 .venv/bin/python -m "
        "pytest tests/test_docs.py -k metrics_page` rewrites it): every view, gate and export reads "
        "these names, units and definitions. The export's other columns are in `columns.csv` "
        "([Results as data](results.md)).\n\n"
        "| metric | unit | direction | a gate may name it | definition |\n|---|---|---|---|---|\n"
        f"{rows}\n"
    )


def _fill(paragraph: str, width: int) -> str:
    """A paragraph wrapped to ``width``; a list ("- " items) item by item, with a hanging indent."""
    items = re.split(r"\n(?=- )", paragraph)
    indent = "  " if paragraph.startswith("- ") else ""
    return "\n".join(textwrap.fill(" ".join(i.split()), width, subsequent_indent=indent) for i in items)


def kind_of(path: Path) -> Kind:
    """What a directory given on the command line holds: a run or a study; anything else is refused
    here, with what each would have held."""
    from harness.results.study.record import is_study_dir

    if is_study_dir(path):
        return "study"
    if (path / RUN_RECORD).is_file():
        return "run"
    raise UserError(
        f"{path}: not a run directory (no {RUN_RECORD}) nor a study directory (no study.json); runs are "
        "stored as results/<regime>/<run-id>, studies as results/<regime>/study-<id>"
    )


# `latest` in place of a run directory (bench show latest, bench report latest, bench gate latest
# --baseline ..., bench run --resume latest): the newest run under ./results; DIR/latest, under DIR
RUN_ALIAS = "latest"
RUN_ARGS = ("run_dir", "other_run_dir", "baseline", "resume", "paths")  # the arguments that name a run
ALIAS_HELP = (
    "; 'latest': the newest run under ./results ('DIR/latest': under DIR), by the start time its run id "
    "begins with (a study's points and confirmation runs are not counted)"
)
_RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")  # harness.results.files.new_run_id


def newest_run(root: Path) -> Path:
    """The newest run directly under ``root`` or under its regime folders (``root/<regime>/<run-id>``,
    or ``root/<run-id>``): the largest start time its run id begins with (UTC, to the second), then
    the latest written record; a study's points and a ``-confirm`` run are not named by a run id."""
    found = [
        record.parent
        for pattern in (f"*/{RUN_RECORD}", f"*/*/{RUN_RECORD}")
        for record in root.glob(pattern)
        if _RUN_ID.fullmatch(record.parent.name)
    ]
    if not found:
        raise UserError(
            f"{RUN_ALIAS}: no run under {root} (runs are stored as {root}/<regime>/<run-id>); "
            f"name a run directory, or DIR/{RUN_ALIAS} for the newest under DIR"
        )
    return max(found, key=lambda run: (run.name[:15], (run / RUN_RECORD).stat().st_mtime))


def resolve_alias(path: Path) -> Path:
    """``path``, or for ``latest`` (``DIR/latest``) that is no directory, the newest run under
    ./results (under DIR)."""
    if path.name != RUN_ALIAS or path.exists():
        return path
    return newest_run(Path("results") if path == Path(RUN_ALIAS) else path.parent)


def resolve_run_aliases(args: argparse.Namespace) -> list[tuple[Path, Path]]:
    """Every run argument of a parsed command line given as ``latest`` resolved in place
    (``RUN_ARGS``); what each was resolved to, for the command to say."""
    resolved = []
    for name in RUN_ARGS:
        value = getattr(args, name, None)
        values = value if isinstance(value, list) else [value]
        found = [resolve_alias(v) if isinstance(v, Path) else v for v in values]
        resolved += [(given, run) for given, run in zip(values, found, strict=True) if given is not run]
        if value is not None:
            setattr(args, name, found if isinstance(value, list) else found[0])
    return resolved


def add_alias_help(parser: argparse.ArgumentParser) -> None:
    """``ALIAS_HELP`` after the help of every run argument (``RUN_ARGS``) a subcommand (and its
    actions: bench history add) takes as a path."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                add_alias_help(sub)
        elif action.dest in RUN_ARGS and action.type is Path and action.help:
            action.help += ALIAS_HELP


def require_run(path: Path, purpose: str) -> Path:
    """A path that must be a run: a study is refused with the way to name one of its points."""
    if kind_of(path) == "study":
        raise UserError(f"{path} is a study: {purpose} one of its points (e.g. {path / 'points' / 'p0'})")
    return path


def add_executor_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "study executors",
        "how a study's points run (a study only): each point is one job on one node",
    )
    group.add_argument(
        "--executor",
        choices=["local", "slurm", "ray"],
        help="local (default): on this node, points on disjoint GPU sets side by side (CPU points one "
        "at a time); slurm: one submitit job per point; ray: one Ray task per point. --resume uses the "
        "study's own executor unless given",
    )
    group.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="GPUs of the node (local; the Ray instance the command starts): default, every GPU visible",
    )
    group.add_argument(
        "--gpus-per-point",
        type=int,
        metavar="N",
        help="GPUs each point gets (default: its tensor_parallel_size; CPU points none): e.g. 8 to keep "
        "each point alone on an 8-GPU node",
    )
    group.add_argument("--partition", help="Slurm partition (slurm)")
    group.add_argument("--account", help="Slurm account (slurm)")
    group.add_argument(
        "--time-limit",
        type=int,
        metavar="MIN",
        help="each point's time limit in minutes (default: per arm its start-up timeout plus 2 min per "
        "measured window)",
    )
    group.add_argument(
        "--slurm-cluster",
        choices=["slurm", "local", "debug"],
        help="submitit's cluster (slurm): local and debug run the jobs on this machine without Slurm",
    )
    group.add_argument("--ray-address", help="an existing Ray cluster (ray); default: start one on this node")


def executor_options(args: argparse.Namespace, base: Any = None) -> Any:
    """The executor flags over ``base`` (a resumed study's own options); None when none was given."""
    from harness.results.study.record import ExecutorOptions

    flags = {
        "name": args.executor,
        "gpus": args.gpus,
        "gpus_per_point": args.gpus_per_point,
        "partition": args.partition,
        "account": args.account,
        "time_limit_min": args.time_limit,
        "slurm_cluster": args.slurm_cluster,
        "ray_address": args.ray_address,
    }
    given = {k: v for k, v in flags.items() if v is not None}
    for name in ("gpus", "gpus_per_point", "time_limit_min"):
        if given.get(name, 1) < (0 if name == "gpus" else 1):
            raise UserError(f"--{name.replace('_min', '').replace('_', '-')} must be positive")
    if not given:
        return base
    return (base or ExecutorOptions()).model_copy(update=given)


def read_regime(path: Path, overrides: Sequence[Override] = ()) -> Any:
    """A regime file, validated, with the command line's ``overrides`` set in it and each arm's
    ``k_schedule: {from: STUDY}`` resolved to that study's schedule: what `bench run` and `bench
    validate` work from."""
    from harness.config.regime import load_regime
    from harness.results.study.policy_file import resolve_schedules

    return resolve_schedules(load_regime(path, overrides), path)


def add_override_flags(parser: argparse.ArgumentParser) -> None:
    """``--set PATH=VALUE`` and the common overrides as flags (harness.core.overrides)."""
    group = parser.add_argument_group(
        "changing the regime from the command line",
        "set in the regime file's data before it is validated (the same checks, naming the flag); the "
        "run records each and is fingerprinted with it (calibrations, history and gates see it)",
    )
    group.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        dest="set_values",
        help="set one field, VALUE in YAML: --set load.concurrency=[1,8], --set "
        "arms.ngram_k4.num_speculative_tokens=3, --set engine.env.OMP_NUM_THREADS=2 (repeatable)",
    )
    group.add_argument("--num-prompts", type=int, metavar="N", help="load.num_prompts: prompts per window")
    group.add_argument(
        "--concurrency",
        metavar="N[,N...]",
        help="the closed-loop levels to measure (load.concurrency); without --request-rate, no open-loop "
        "level is measured",
    )
    group.add_argument(
        "--request-rate",
        metavar="R[,R...]",
        help="the open-loop rates to measure, requests/s (load.request_rate); without --concurrency, no "
        "closed-loop level is measured",
    )
    group.add_argument(
        "--arms", metavar="NAME[,NAME...]", help="measure only these arms (the baseline always runs)"
    )
    group.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="ARM=URL|URL",
        dest="endpoints",
        help="measure an existing server for that arm (arms.ARM.endpoint): the harness never starts or "
        "stops it; every arm must then be one (repeatable). A URL alone: that one server as the "
        "regime's baseline arm, compared with nothing (its numbers and their spread over rounds)",
    )


def overrides_from(args: argparse.Namespace) -> list[Override]:
    from harness.core.overrides import flag_overrides, parse_set

    found = flag_overrides(args.num_prompts, args.concurrency, args.request_rate, args.arms, args.endpoints)
    return found + [parse_set(text) for text in args.set_values]
