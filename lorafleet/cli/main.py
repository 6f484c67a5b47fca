"""The `lorafleet` group, its global options, and the one place errors become `error: …` and exit codes."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from lorafleet import __version__
from lorafleet.cli.options import global_options
from lorafleet.errors import LorafleetError

log = logging.getLogger("lorafleet")


def _debug() -> bool:
    return os.environ.get("LORAFLEET_DEBUG", "") not in ("", "0", "false", "no")


def _fail(lines: list[str], hint: str | None, code: int) -> None:
    for line in lines:
        click.echo(f"error: {line}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


class LorafleetGroup(click.Group):
    """Runs click without its own error printing so every failure is one `error:` line and an exit code."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(
                args=args, prog_name=prog_name or "lorafleet", complete_var=complete_var, standalone_mode=False, **extra
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
            click.echo("error: aborted", err=True)
            sys.exit(130)
        except LorafleetError as exc:
            if _debug():
                raise
            _fail(exc.lines(), exc.hint, exc.exit_code)
        except (KeyboardInterrupt, EOFError):
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            sys.stderr.close()
            sys.exit(1)
        except Exception as exc:  # a bug: say so in one line, keep the traceback behind LORAFLEET_DEBUG
            if _debug():
                raise
            _fail(
                [f"internal error: {type(exc).__name__}: {exc}"],
                "run again with LORAFLEET_DEBUG=1 for the traceback",
                1,
            )
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=LorafleetGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@global_options(with_env=True)
@click.version_option(__version__, "--version", prog_name="lorafleet")
def cli() -> None:
    """Keep the right LoRA adapters resident across a GPU fleet.

    Global options (-i, --state, -v) may be given before or after the command name.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _register() -> None:
    from lorafleet.cli import completion, inventory, replay, vram, warm

    cli.add_command(inventory.inventory)
    cli.add_command(vram.vram)
    cli.add_command(warm.warm)
    cli.add_command(replay.replay)
    cli.add_command(replay.trace)
    cli.add_command(completion.completion)


_register()


def main() -> None:
    cli.main()
