"""`lorafleet completion SHELL`: the completion script click generates, as kept in completions/."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


def completion_script(shell: str) -> str:
    from lorafleet.cli.main import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - guarded by click.Choice
        raise click.UsageError(f"unsupported shell {shell!r}")
    return cls(cli, {}, "lorafleet", "_LORAFLEET_COMPLETE").source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(lorafleet completion bash)"   (or save to /etc/bash_completion.d/lorafleet)
    zsh:   lorafleet completion zsh > "${fpath[1]}/_lorafleet"
    fish:  lorafleet completion fish > ~/.config/fish/completions/lorafleet.fish
    """
    click.echo(completion_script(shell), nl=False)
