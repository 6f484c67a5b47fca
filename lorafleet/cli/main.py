"""The `lorafleet` group, its global options, and the one place errors become `error: …` and exit codes."""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import Any

import click
from click.shell_completion import CompletionItem

from lorafleet import CORE, __version__
from lorafleet.cli.failure import error_document, json_asked
from lorafleet.cli.options import global_options
from lorafleet.cli.signals import terminate_as_interrupt
from lorafleet.errors import InventoryError, LorafleetError, Problem
from lorafleet.stopping import Interrupted


def _debug() -> bool:
    return os.environ.get("LORAFLEET_DEBUG", "") not in ("", "0", "false", "no")


def _fail(
    lines: list[str], hint: str | None, code: int, problems: list[Problem] | None = None, message: str | None = None
) -> None:
    """The one place a failure becomes its exit code: `error:` lines on stderr, and where --json was asked the
    same as JSON on stdout — `{"error": {"message", "lines", "hint", "exit_code", "problems"}}`, problems (each
    `{"file", "line", "field", "message"}`) for a file with mistakes, else null."""
    for line in lines:
        click.echo(f"error: {line}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    if _JSON_ASKED:
        located = (
            None
            if problems is None
            else [{"file": p.file, "line": p.line, "field": p.path, "message": p.message} for p in problems]
        )
        try:
            click.echo(error_document(lines, hint, code, located, message))
        except OSError:  # stdout's reader is gone or its disk full: the stderr lines and the exit code say it
            _drop_stdout()
    sys.exit(code)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what could not be written raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


_JSON_ASKED = False  # the command line asked for --json (set as main starts)


# Every command: its module, and the one-line help shown in listings and completion. A command's module (and the
# libraries it needs: httpx, paramiko, rich, PyYAML) is imported only when that command runs, so `--version` and
# a shell's Tab cost little more than importing click.
COMMANDS: dict[str, tuple[str, str]] = {
    "completion": ("lorafleet.cli.completion:completion", "Print the shell completion script for SHELL."),
    "daemon": ("lorafleet.cli.daemon:daemon", "Follow the gateway's logs, warm adapters ahead of demand, journal it."),
    "inventory": ("lorafleet.cli.inventory:inventory", "Validate and show the fleet inventory."),
    "plan": ("lorafleet.cli.plan:plan", "Plan which adapters stay resident on which engine, from the demand."),
    "stats": ("lorafleet.cli.stats:stats", "Hit ratios, cold ms avoided and prefetch waste from the journal."),
    "replay": ("lorafleet.cli.replay:replay", "Replay access LOGS through the policy core with simulated engines."),
    "trace": ("lorafleet.cli.replay:trace", "Synthetic access logs for replay and benchmarks."),
    "unload": ("lorafleet.cli.unload:unload", "Unload ADAPTERS from engines (where registered) and forget them."),
    "vram": ("lorafleet.cli.vram:vram", "VRAM per GPU across the fleet: NVML here, nvidia-smi over SSH elsewhere."),
    "warm": ("lorafleet.cli.warm:warm", "Pre-load ADAPTERS on engines now, through the engines' own HTTP APIs."),
}


class LorafleetGroup(click.Group):
    """Runs click without its own error printing so every failure is one `error:` line and an exit code.

    Commands load lazily from COMMANDS; listing and completing command names needs none of them.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        module_name, _, attr = COMMANDS[cmd_name][0].partition(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        self.commands[cmd_name] = command
        return command

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        items = [
            CompletionItem(name, help=COMMANDS[name][1]) for name in sorted(COMMANDS) if name.startswith(incomplete)
        ]
        return items + [i for i in click.Command.shell_complete(self, ctx, incomplete) if i.value not in COMMANDS]

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        global _JSON_ASKED
        argv = list(args) if args is not None else sys.argv[1:]
        _JSON_ASKED = json_asked(argv)
        try:
            with terminate_as_interrupt():  # SIGTERM ends any command as Ctrl-C does: one line, exit 143
                rv = super().main(
                    args=args,
                    prog_name=prog_name or "lorafleet",
                    complete_var=complete_var,
                    standalone_mode=False,
                    **extra,
                )
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
            sys.exit(2)
        except click.UsageError as exc:
            hint = None
            if exc.ctx is not None:
                hint = f"see '{exc.ctx.command_path} --help'"
            _fail([exc.format_message()], hint, 2)
        except click.ClickException as exc:
            _fail([exc.format_message()], None, exc.exit_code)
        except click.Abort:
            _fail(["aborted"], None, 130)
        except Interrupted as exc:  # SIGTERM outside a run that reports its partial results (choosing targets)
            _fail([exc.reason], None, exc.code)
        except LorafleetError as exc:
            if _debug():
                raise
            problems = exc.problems if isinstance(exc, InventoryError) else None
            _fail(exc.lines(), exc.hint, exc.exit_code, problems, exc.message)
        except (KeyboardInterrupt, EOFError):
            _fail(["interrupted"], None, 130)
        except BrokenPipeError:  # `lorafleet … | head`: the reader has what it wanted; leave quietly, exit 0
            _drop_stdout()
            sys.exit(0)
        except Exception as exc:  # a bug: say so in one line, keep the traceback behind LORAFLEET_DEBUG
            if _debug():
                raise
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:  # a full disk is no bug: say which
                try:
                    sys.stdout.flush()
                except OSError:  # the output itself did not fit
                    _drop_stdout()
                _fail([f"{exc.strerror}" + (f": {exc.filename}" if exc.filename else "")], None, 1)
            _fail(
                [f"internal error: {type(exc).__name__}: {exc}"],
                "run again with LORAFLEET_DEBUG=1 for the traceback",
                1,
            )
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=LorafleetGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@global_options(with_env=True)
@click.version_option(
    __version__, "--version", prog_name="lorafleet", message=f"%(prog)s, version %(version)s (core: {CORE})"
)
def cli() -> None:
    """Keep the right LoRA adapters resident across a GPU fleet.

    Global options (-i, --state, -v) may be given before or after the command name.
    """


def main() -> None:
    cli.main()
