"""The CLI reference in Markdown, generated from the click commands (docs/cli.md is checked against it)."""

from __future__ import annotations

import click

from lorafleet.cli.shapes import SHAPES


def _walk(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    out = [(path, command)]
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                out += _walk(sub, [*path, name])
    return out


def cli_reference(root: click.Command) -> str:
    lines = [
        "# CLI reference",
        "",
        "Generated from the click commands by `lorafleet.cli.reference`; a test fails",
        "when this file drifts from the code.",
        "",
    ]
    settings = dict(root.context_settings)  # children inherit the group's (-h, width) when run for real
    for path, command in _walk(root, ["lorafleet"]):
        ctx = click.Context(command, info_name=" ".join(path), **settings)
        lines.append(f"## `{' '.join(path)}`")
        lines.append("")
        lines.append("```")
        lines.append(command.get_help(ctx).rstrip())
        lines.append("```")
        lines.append("")
    lines += [
        "## JSON shapes",
        "",
        "Every listing's `--json` (from `lorafleet.cli.shapes`); keys are added, never renamed.",
        "",
    ]
    for shape in SHAPES:
        doc = " ".join((shape.__doc__ or "").split())
        lines += [f"- {doc}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    from lorafleet.cli.main import cli

    print(cli_reference(cli), end="")
