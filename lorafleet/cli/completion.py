"""`lorafleet completion SHELL`: the completion script click generates, as kept in completions/."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


def completion_script(root: click.Command, shell: str) -> str:
    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - guarded by click.Choice
        raise click.UsageError(f"unsupported shell {shell!r}")
    return cls(root, {}, "lorafleet", "_LORAFLEET_COMPLETE").source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(lorafleet completion bash)"   (or save to /etc/bash_completion.d/lorafleet)
    zsh:   lorafleet completion zsh > "${fpath[1]}/_lorafleet"
    fish:  lorafleet completion fish > ~/.config/fish/completions/lorafleet.fish
    """
    root = click.get_current_context().find_root().command
    click.echo(completion_script(root, shell), nl=False)
