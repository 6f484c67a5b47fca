"""The secret audit: every command runs with a known key in play, and the key appears nowhere it could leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import INVENTORIES
from tests.engines.test_warm import vllm_entry, write_inventory

KEY = "sk-audit-4f9c2b7e1d8a6350"  # looks like a real key; must never be printed or stored


def leaked(*texts: str) -> bool:
    return any(KEY in t for t in texts)


def test_no_command_prints_or_stores_the_key(
    tmp_path: Path, run_cli, emulators, adapter_dirs, monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    monkeypatch.setenv("AUDIT_KEY", KEY)
    e = emulators(kind="vllm", api_key=KEY)
    entry = vllm_entry("v", e.url).replace("}", ", api_key_env: AUDIT_KEY}")
    inv = str(write_inventory(tmp_path, [entry], adapter_dirs))
    runs = [
        ("inventory", "check", "-i", inv),
        ("inventory", "check", "-i", inv, "--json"),
        ("inventory", "show", "-i", inv),
        ("inventory", "show", "-i", inv, "--json"),
        ("warm", "r8", "-i", inv),
        ("warm", "r8", "missing", "-i", inv, "--json", "--prime"),
        ("warm", "r8", "-i", inv, "--dry-run"),
        ("-v", "warm", "r16", "-i", inv),
        ("vram", "-i", inv, "--json"),
        ("replay", str(INVENTORIES / "demo-access.jsonl"), "-i", str(INVENTORIES / "demo.yaml")),
        ("trace", "synth", "--out", str(tmp_path / "synth")),
        ("completion", "bash"),
    ]
    for args in runs:
        result = run_cli(*args)
        assert not leaked(result.stdout, result.stderr), args
    assert e.state.registry  # the key did work: the engine accepted the loads
    state = isolated_env
    for path in state.parent.glob("*"):
        assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    "url",
    [
        "http://admin:{key}@127.0.0.1:8000",
        "http://127.0.0.1:8000/?api_key={key}",
        "https://127.0.0.1:8000/v1?token={key}&x=1",
    ],
)
def test_credentials_in_engine_urls_are_refused_without_echo(tmp_path: Path, run_cli, url: str) -> None:
    text = (INVENTORIES / "demo.yaml").read_text()
    assert "url: http://127.0.0.1:18000" in text
    inv = tmp_path / "inv.yaml"
    inv.write_text(text.replace("url: http://127.0.0.1:18000", f"url: '{url.format(key=KEY)}'", 1))
    for args in (("inventory", "check", "-i", str(inv)), ("inventory", "show", "--json", "-i", str(inv))):
        result = run_cli(*args)
        assert result.exit_code == 2
        assert "refused" in result.stderr and ".url:" in result.stderr
        assert not leaked(result.stdout, result.stderr)


def test_a_key_pasted_as_api_key_env_is_refused_without_echo(tmp_path: Path, run_cli) -> None:
    text = (INVENTORIES / "demo.yaml").read_text()
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        text.replace(
            "url: http://127.0.0.1:18000",
            f"url: http://127.0.0.1:18000\n        api_key_env: {KEY.replace('-', '_')}",
            1,
        )
    )
    result = run_cli("inventory", "check", "-i", str(inv))
    assert result.exit_code == 2 and "api_key_env" in result.stderr and "not shown" in result.stderr
    assert KEY.replace("-", "_") not in result.stderr


def test_verbose_shows_calls_and_decisions_on_stderr_never_the_key(
    tmp_path: Path, emulators, adapter_dirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    e = emulators(kind="vllm", api_key=KEY)
    entry = vllm_entry("v", e.url).replace("}", ", api_key_env: AUDIT_KEY}")
    inv = str(write_inventory(tmp_path, [entry], adapter_dirs))
    env = {**os.environ, "AUDIT_KEY": KEY, "PYTHONPATH": str(ROOT), "LORAFLEET_STATE": str(tmp_path / "s.db")}
    for flag, expected in (("-v", "POST /v1/load_lora_adapter -> 200"), ("-vv", "answer")):
        result = subprocess.run(
            [sys.executable, "-m", "lorafleet", flag, "warm", "r8", "r16", "-i", inv, "--json"],
            env={**env, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        json.loads(result.stdout)  # stdout stays pure JSON
        assert expected in result.stderr and "h/v: r" in result.stderr
        assert not leaked(result.stdout, result.stderr)


def test_the_key_from_a_file_beside_the_inventory_or_in_systemds_credentials_directory(
    tmp_path: Path, run_cli, emulators, adapter_dirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    e = emulators(kind="vllm", api_key=KEY)
    entry = vllm_entry("v", e.url).replace("}", ", api_key_file: vllm.key}")
    inv = str(write_inventory(tmp_path, [entry], adapter_dirs))
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    (tmp_path / "vllm.key").write_text(KEY + "\n")  # beside the inventory; the newline is not part of the key
    result = run_cli("warm", "r8", "-i", inv, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["action"] == "loaded" and not leaked(result.stdout, result.stderr)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "vllm.key").write_text(KEY)
    (tmp_path / "vllm.key").write_text("sk-wrong")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))  # LoadCredential=vllm.key:/etc/...
    result = run_cli("warm", "r16", "-i", inv, "--json")
    assert result.exit_code == 0, result.stderr
    shown = run_cli("inventory", "show", "-i", inv, "--json")
    assert json.loads(shown.stdout)["hosts"][0]["engines"][0]["api_key_file"] == "vllm.key"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot be read: No such file or directory"),
        ("", "the key alone, on one line"),
        (f"{KEY}\nsecond", "the key alone, on one line"),
        (KEY + " " * (64 * 1024 - len(KEY)) + "\n", "is over 64 KiB: not a key"),  # one byte over: a key's padding
        ("\udcff" + KEY, "is not UTF-8 text"),
    ],
)
def test_an_unusable_key_file_is_an_input_error_naming_the_file_not_its_contents(
    tmp_path: Path, run_cli, adapter_dirs, monkeypatch: pytest.MonkeyPatch, content: str | None, words: str
) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    entry = vllm_entry("v", "http://127.0.0.1:9").replace("}", ", api_key_file: vllm.key}")
    inv = str(write_inventory(tmp_path, [entry], adapter_dirs))
    if content is not None:
        (tmp_path / "vllm.key").write_bytes(content.encode("utf-8", "surrogateescape"))
    result = run_cli("warm", "r8", "-i", inv)
    assert result.exit_code == 2 and words in result.stderr and str(tmp_path / "vllm.key") in result.stderr
    assert not leaked(result.stdout, result.stderr) and "Traceback" not in result.stderr


def test_api_key_env_and_api_key_file_on_one_engine_are_refused_but_its_own_overrides_an_inherited_one(
    tmp_path: Path, run_cli, adapter_dirs
) -> None:
    both = vllm_entry("v", "http://127.0.0.1:9").replace("}", ", api_key_env: K, api_key_file: k.key}")
    result = run_cli("inventory", "check", "-i", str(write_inventory(tmp_path, [both], adapter_dirs)))
    assert result.exit_code == 2 and "both apply" in result.stderr and "api_key_file" in result.stderr
    own = vllm_entry("v", "http://127.0.0.1:9").replace("}", ", api_key_file: k.key}")
    inv = write_inventory(tmp_path, [own], adapter_dirs)
    inv.write_text(
        inv.read_text().replace("    request_timeout_s: 2\n", "    request_timeout_s: 2\n    api_key_env: K\n")
    )
    result = run_cli("inventory", "show", "--json", "-i", str(inv))
    assert result.exit_code == 0, result.stderr
    import json

    engine = json.loads(result.stdout)["hosts"][0]["engines"][0]
    assert (engine["api_key_env"], engine["api_key_file"]) == (None, "k.key")
