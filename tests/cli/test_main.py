"""The CLI frame: global options in either position, one-line errors, exit codes, completions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import click
import pytest

from lorafleet import __version__
from lorafleet.cli.completion import SHELLS
from tests.conftest import INVENTORIES, ROOT

DEMO = str(INVENTORIES / "demo.yaml")


def test_version(run_cli) -> None:
    """The version, and which core runs (compiled by the install, or its plain source: setup.py)."""
    from lorafleet import CORE

    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout == f"lorafleet, version {__version__} (core: {CORE})\n"


@pytest.mark.parametrize(
    "args",
    [
        ["-i", DEMO, "inventory", "check"],
        ["inventory", "check", "-i", DEMO],
        ["--inventory", "/nonexistent.yaml", "inventory", "check", "--inventory", DEMO],
    ],
)
def test_global_options_before_and_after_the_command(args: list[str], run_cli) -> None:
    result = run_cli(*args)
    assert result.exit_code == 0, result.stderr
    assert "fleet demo" in result.stdout


def test_inventory_from_environment(run_cli) -> None:
    result = run_cli("inventory", "check", env={"LORAFLEET_INVENTORY": DEMO})
    assert result.exit_code == 0 and "fleet demo" in result.stdout


def test_default_inventory_is_lorafleet_yaml_in_cwd(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("inventory", "check")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == "error: inventory 'lorafleet.yaml' not found"
    (tmp_path / "lorafleet.yaml").write_text((INVENTORIES / "demo.yaml").read_text())
    assert run_cli("inventory", "check").exit_code == 0


def test_an_inventory_that_is_a_device_is_refused_and_a_pipe_is_read(run_cli, tmp_path: Path) -> None:
    """/dev/zero would be read for ever; a pipe (`-i <(generate-inventory)`) is how scripts pass one."""
    result = run_cli("inventory", "check", "-i", "/dev/zero")
    assert result.exit_code == 2 and result.stderr == "error: inventory '/dev/zero' is not a file (a device?)\n"
    fifo = tmp_path / "inventory.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text((INVENTORIES / "demo.yaml").read_text()))
    writer.start()
    result = run_cli("inventory", "check", "-i", str(fifo))
    writer.join(timeout=10)
    assert result.exit_code == 0 and "fleet demo" in result.stdout


def test_no_number_option_takes_nan_or_infinity_or_a_count_past_2_to_the_31(run_cli) -> None:
    """click's FloatRange lets NaN through and an unbounded one takes infinity; every float option of every
    command is a `Finite`, and every count is bounded, so each is refused in one line before anything runs."""
    from lorafleet.cli.main import COMMANDS, cli
    from lorafleet.cli.options import Finite

    ctx = click.Context(cli)
    checked = 0
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        subcommands = getattr(command, "commands", {})
        for path, leaf in [([name], command)] + [([name, sub], c) for sub, c in subcommands.items()]:
            for param in leaf.params:
                if not isinstance(param, click.Option):
                    continue
                assert (param.type is not click.FLOAT and not isinstance(param.type, click.FloatRange)) or isinstance(
                    param.type, Finite
                ), (path, param.name)
                counted = isinstance(param.type, click.IntRange) and not param.count  # -v -v is no number
                if counted:
                    assert param.type.max is not None and param.type.max <= 2**31 - 1, (path, param.name)
                bad = ["nan", "inf"] if isinstance(param.type, Finite) else []
                bad += ["9223372036854775808"] if counted else []
                for value in bad:
                    result = run_cli(*path, param.opts[0], value, "-i", DEMO)
                    assert result.exit_code == 2, (path, param.name, value, result.stderr)
                    assert result.stderr.startswith(f"error: Invalid value for '{param.opts[0]}'"), result.stderr
                    checked += 1
    assert checked >= 20


@pytest.mark.parametrize("moment", ["0001-01-01T00:00", "9999-12-31T23:59:59", "1969-12-31T23:00"])
def test_stats_refuses_a_moment_outside_its_journals_years(run_cli, moment: str, tmp_path: Path) -> None:
    result = run_cli("stats", "--since", moment, "--state", str(tmp_path / "s.db"), "-i", DEMO)
    assert result.exit_code == 2 and "is not between 1970 and 2999" in result.stderr


@pytest.mark.parametrize(("option", "shown"), [("--state", "'--state'"), ("-i", "'-i' / '--inventory'")])
def test_an_empty_path_is_refused_not_taken_for_the_default(run_cli, option: str, shown: str) -> None:
    """`--state "$STATE"` with STATE unset must not read or write the default journal."""
    result = run_cli("stats", option, "")
    assert result.exit_code == 2 and result.stderr.startswith(f"error: Invalid value for {shown}: an empty path")


def test_usage_errors_are_one_line_and_exit_2(run_cli) -> None:
    result = run_cli("inventory", "check", "--bogus")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: No such option '--bogus'")
    assert "Traceback" not in result.stderr
    result = run_cli("nosuchcommand")
    assert result.exit_code == 2 and result.stderr.startswith("error: No such command 'nosuchcommand'")


def test_debug_env_shows_the_traceback(write_yaml) -> None:
    env = {**os.environ, "LORAFLEET_DEBUG": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lorafleet", "inventory", "check", "-i", "/nonexistent.yaml"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "lorafleet", "inventory", "check", "-i", "/nonexistent.yaml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_show_json_shape(run_cli) -> None:
    result = run_cli("inventory", "show", "--json", "-i", str(INVENTORIES / "reference.yaml"))
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    host = data["hosts"][0]
    assert host["name"] == "dgx-01.dc1.acme.internal" and host["provider"] == "onprem"
    engine = host["engines"][0]
    assert {"name", "kind", "url", "base_model"} <= set(engine)
    assert engine["name"] == "vllm-a" and engine["url"] == "http://dgx-01.dc1.acme.internal:8000"
    finance = next(a for a in data["adapters"] if a["id"] == "finance-llama3-sec-filings-r128")
    assert (finance["rank"], finance["size_bytes"], finance["size_source"]) == (128, 671_088_640, "estimated")
    assert len(data["hosts"]) == 11


def test_show_tables_name_hosts_engines_adapters(run_cli) -> None:
    result = run_cli("inventory", "show", "--wide", "-i", DEMO)  # URLs are a --wide column
    assert result.exit_code == 0
    for words in ("localhost/vllm-0", "http://127.0.0.1:18000", "finance-r128", "640.0 MiB", "estimated"):
        assert words in result.stdout


def test_check_warns_but_passes_on_rank_above_every_engine(write_yaml, run_cli) -> None:
    inv = write_yaml(
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - {name: h, provider: aws, engines: [{name: e, kind: vllm, url: 'http://h:1', base_model: m}]}\n"
        "adapters:\n  - {id: big, base_model: m, path: /big, rank: 64}\n"
    )
    result = run_cli("inventory", "check", "-i", str(inv))
    assert result.exit_code == 0
    assert "warning: adapter big: rank 64 exceeds max_lora_rank on every engine of m" in result.stderr


def test_secret_values_never_printed(write_yaml, run_cli) -> None:
    inv = write_yaml(
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - {name: h, provider: aws, engines: [{name: e, kind: vllm, url: 'http://h:1', base_model: m, "
        "api_key: sk-very-secret}]}\n"
    )
    result = run_cli("inventory", "check", "-i", str(inv))
    assert result.exit_code == 2
    assert "sk-very-secret" not in result.stdout + result.stderr
    assert "api_key_env" in result.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_committed_completions_match_the_command(shell: str, run_cli) -> None:
    result = run_cli("completion", shell)
    assert result.exit_code == 0
    committed = ROOT / "completions" / f"lorafleet.{shell}"
    assert committed.read_text() == result.stdout, f"run: lorafleet completion {shell} > {committed}"


def test_cli_reference_is_current(monkeypatch) -> None:
    from lorafleet.cli.main import cli
    from lorafleet.cli.reference import cli_reference

    monkeypatch.setenv("COLUMNS", "100")
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == cli_reference(cli), "run: COLUMNS=100 python -m lorafleet.cli.reference > docs/cli.md"


def test_every_option_of_every_command_has_help_text() -> None:
    import click

    from lorafleet.cli.main import COMMANDS, cli

    ctx = click.Context(cli)
    missing = []
    stack = [(name, cli.get_command(ctx, name)) for name in COMMANDS]
    while stack:
        path, command = stack.pop()
        assert command is not None
        if isinstance(command, click.Group):
            stack += [(f"{path} {n}", c) for n, c in command.commands.items()]
        missing += [f"{path} {p.opts[0]}" for p in command.params if isinstance(p, click.Option) and not p.help]
    assert missing == []


def test_stats_refuses_an_inverted_window_a_zero_watch_and_names_nobody_knows(run_cli, tmp_path) -> None:
    from lorafleet.store.db import open_store

    db = tmp_path / "s.db"
    open_store(db).close()
    inverted = run_cli("stats", "--state", str(db), "--since", "now", "--until", "1h")
    assert inverted.exit_code == 2 and "is not before --until" in inverted.stderr
    assert run_cli("stats", "--state", str(db), "--watch", "0").exit_code == 2
    typo = run_cli("stats", "loads", "--state", str(db), "-i", str(INVENTORIES / "demo.yaml"), "--adapter", "code-r46")
    assert typo.exit_code == 2 and "did you mean 'code-r64'?" in typo.stderr
    unknown = run_cli("stats", "loads", "--state", str(db), "--engine", "nowhere/e0")
    assert unknown.exit_code == 2 and "neither the journal nor the inventory knows it" in unknown.stderr


def test_errors_are_json_where_json_was_asked(run_cli, write_yaml) -> None:
    bad = write_yaml("hosts:\n  - {name: a, provider: nope}\n")
    result = run_cli("inventory", "check", "-i", str(bad), "--json")
    assert result.exit_code == 2 and result.stderr.startswith("error: ")  # humans still read stderr
    error = json.loads(result.stdout)["error"]
    assert error["exit_code"] == 2 and error["message"] == "1 problem in the inventory"
    (problem,) = error["problems"]
    assert (problem["file"], problem["line"], problem["field"]) == (str(bad), 2, "hosts[0].provider")
    usage = run_cli("warm", "--json", "--no-such-flag")
    assert usage.exit_code == 2 and json.loads(usage.stdout)["error"]["hint"].endswith("warm --help'")
    plain = run_cli("inventory", "check", "-i", str(bad))
    assert plain.exit_code == 2 and plain.stdout == ""


def test_verbose_output_to_a_file_is_one_utc_stamped_line_per_record(tmp_path) -> None:
    log = tmp_path / "v.log"
    long_name = "x" * 120
    inv = tmp_path / f"{long_name}.yaml"
    inv.write_text((INVENTORIES / "demo.yaml").read_text())
    command = [sys.executable, "-m", "lorafleet", "-v", "inventory", "check", "-i", str(inv)]
    with open(log, "w") as err:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "COLUMNS": "80"}, check=True)
    (line,) = [x for x in log.read_text().splitlines() if long_name in x]  # not wrapped at 80 columns
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO inventory ", line)


def test_check_sums_hosts_gpus_and_engines_per_provider(run_cli, write_yaml) -> None:
    """A host's GPUs add to its provider's count (a host that does not say adds none)."""
    engine = "{name: e, kind: vllm, url: 'http://127.0.0.1:1', base_model: m}"
    inv = write_yaml(
        "fleet: f\nbase_models:\n"
        "  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        f"hosts:\n  - {{name: a1, provider: aws, gpus: 2, engines: [{engine}]}}\n"
        "  - {name: a2, provider: aws, gpus: 4}\n  - {name: a3, provider: aws}\n"
        f"  - {{name: g1, provider: gcp, gpus: 8, engines: [{engine}]}}\n"
    )
    shown = json.loads(run_cli("inventory", "check", "--json", "-i", str(inv)).stdout)
    assert [(p["provider"], p["hosts"], p["gpus"], p["engines"]) for p in shown["providers"]] == [
        ("aws", 3, 6, 1),
        ("gcp", 1, 8, 1),
    ]
    text = run_cli("inventory", "check", "-i", str(inv)).stdout
    assert "4 hosts, 14 GPUs, 2 engines" in text
    assert re.search(r"aws +3 hosts +6 GPUs +1 engine", text) and re.search(r"gcp +1 host +8 GPUs +1 engine", text)
