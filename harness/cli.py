"""The ``bench`` command: the parser assembled from the command modules (harness/commands/), and
the only place that turns errors into messages and exit codes.

Exit codes: 0 success; 1 a gate found a regression; 2 bad input (regime, workload, missing
package); 3 engine/infrastructure failure (an arm's server would not start or died; results are
still written); 4 a gate was inconclusive (``bench gate``: a check neither cleared nor failed); 130
interrupted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import ModuleType
from typing import NoReturn

from rich.console import Console
from rich.markup import escape

from harness import __version__
from harness.commands import (
    calibrate,
    capacity,
    drafter,
    export,
    gate,
    history,
    report,
    run,
    show,
    study_point,
    validate,
)
from harness.commands.common import (
    EXIT_ENGINE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    add_alias_help,
    resolve_run_aliases,
    subcommand,
)
from harness.core.config_file import did_you_mean
from harness.core.errors import EngineError, UserError
from harness.core.formats import inert
from harness.present import width as terminal

COMMANDS: tuple[ModuleType, ...] = (
    run,
    capacity,
    calibrate,
    validate,
    show,
    report,
    gate,
    export,
    history,
    drafter,
    study_point,
)


class _Parser(argparse.ArgumentParser):
    """argparse's refusals (a value of the wrong type or outside its choices) in one line, exit 2,
    pointing at --help instead of printing the usage block (subcommands' parsers are of this class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bench",
        description="Benchmark speculative decoding (baseline, ngram, draft model, EAGLE-3, DFlash) in an "
        "exact regime on a real engine.",
        epilog="Quick start on a CPU-only machine: scripts/setup-cpu.sh, then .venv/bin/bench run "
        "regimes/cpu_default.yaml. Each command's --help has examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = subcommand(
            subparsers,
            command.NAME,
            summary=command.SUMMARY,
            description=command.DESCRIPTION,
            examples=command.EXAMPLES,
        )
        command.add_arguments(sub)
        add_alias_help(sub)  # `latest` for a run directory: resolved in main, the same for every command
        sub.set_defaults(handler=command)
    return parser


def unknown_command(argv: list[str]) -> str | None:
    """What is wrong with a command line whose command is no command's name (a typo: the closest
    name; else every name), or None: the parser's own checks then apply. Only ``-h``, ``--help`` and
    ``--version`` may come before the command, so the first other word is it; any other option is
    left to the parser."""
    names = [command.NAME for command in COMMANDS]
    for arg in argv:
        if arg.startswith("-"):
            return None  # --help, --version, or an option the parser refuses in its own words
        if arg in names:
            return None
        return f"no command '{arg}'" + (did_you_mean(arg, names) or f"; the commands: {', '.join(names)}")
    return None


def report_error(exc: BaseException, command: ModuleType, console: Console) -> int:
    """An error that ended ``command``, as the one line the user reads, and its exit code."""
    if isinstance(exc, KeyboardInterrupt):
        console.print(f"[yellow]interrupted[/]: {escape(command.INTERRUPTED)}", highlight=False)
        return EXIT_INTERRUPTED
    label, code = ("engine failure", EXIT_ENGINE) if isinstance(exc, EngineError) else ("error", EXIT_USAGE)
    # inert here, once: a message echoes what a user typed (a run directory, a --set value) and what a
    # server said, either of which may carry a terminal's control sequences
    console.print(f"[red]{label}:[/] {escape(inert(str(exc)))}", highlight=False, soft_wrap=True)
    return code


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupt(signum: int, frame: object) -> None:
    """The first stop signal unwinds the command (its servers stopped, what it measured kept);
    those after it are told to wait, so a second Ctrl-C cannot cut the teardown short."""
    for other in _STOP_SIGNALS:
        signal.signal(other, _while_stopping)
    raise KeyboardInterrupt(f"signal {signum}")


def _while_stopping(signum: int, frame: object) -> None:
    os.write(
        2,
        b"bench: stopping its servers and keeping what was measured; SIGKILL ends bench at once "
        b"(its servers are then sent SIGTERM by the kernel)\n",
    )


def main(argv: list[str] | None = None) -> int:
    # Piped output (CI logs, files) would otherwise be cut to 80 columns and truncate the table.
    console = terminal.console()  # the terminal's width; COLUMNS when piped
    unknown = unknown_command(sys.argv[1:] if argv is None else argv)
    if unknown is not None:  # argparse would list every choice; this names the one meant
        console.print(f"[red]error:[/] {escape(inert(unknown))}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    args = _parser().parse_args(argv)
    command: ModuleType = args.handler
    # SIGTERM/SIGHUP unwind like Ctrl-C, so every server context manager stops its process group.
    # Ctrl-C itself too: left to asyncio.run, SIGINT only cancels the window's main task, and a task
    # that completes anyway (its last request done, the HTTP session closing) swallows the interrupt.
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _raise_interrupt)
    from harness.run.server import kill_all_started

    try:
        for given, run_dir in resolve_run_aliases(args):  # on stderr: a piped table stays clean
            print(f"{given}: {run_dir}", file=sys.stderr)
        code = command.run(args, console)
    except (UserError, EngineError, KeyboardInterrupt) as exc:
        code = report_error(exc, command, console)
    finally:
        kill_all_started()
    ended = getattr(command, "ended", None)
    if ended is not None:
        ended(args, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
