"""Whether an engine's adapter files still exist, asked where the engine reads them: over SSH on a real sshd for
a remote host, on this machine's disk only for an engine that runs here. vLLM dies on the next request naming an
evicted adapter whose files are gone, so the daemon asks this on every reconcile (docs/engines.md)."""

from __future__ import annotations

import socket
from pathlib import Path

from lorafleet.inventory import load_inventory
from lorafleet.probe.files import FileChecker, runs_here
from tests.sshd_server import Sshd

MODELS = "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"


def remote_inventory(sshd: Sshd, tmp_path: Path, port: int | None = None) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(
        MODELS + "hosts:\n  - name: gpu-1\n    address: 127.0.0.1\n    provider: onprem\n"
        f"    ssh: {{user: {sshd.user}, port: {port or sshd.port}, key: '{sshd.client_key}', "
        f"known_hosts: '{sshd.write_known_hosts(tmp_path / 'known_hosts')}', config: '{tmp_path / 'no-config'}', "
        "connect_timeout_s: 3, command_timeout_s: 10}\n"
        "    engines:\n      - {name: e0, kind: vllm, url: 'http://10.1.2.3:8000', base_model: m}\n"
    )
    return path


def test_over_ssh_only_the_paths_that_are_gone_are_named_whatever_their_characters(sshd: Sshd, tmp_path: Path) -> None:
    there = tmp_path / "adapters" / "with space"
    there.mkdir(parents=True)
    quoted = tmp_path / "adapters" / "it's $HOME; `x`"
    quoted.mkdir()
    paths = {
        "a": str(there),
        "b": str(tmp_path / "adapters" / "gone"),
        "c": str(quoted),
        "d": str(tmp_path / "adapters" / "gone too; touch pwned"),
    }
    checker = FileChecker(load_inventory(remote_inventory(sshd, tmp_path)))
    try:
        assert checker.missing("gpu-1/e0", paths) == ["b", "d"]
        assert checker.missing("gpu-1/e0", {"a": str(there)}) == []
        assert checker.missing("gpu-1/e0", {}) == [] and checker.missing("gpu-1/nope", paths) == []
    finally:
        checker.close()
    assert not (Path.cwd() / "pwned").exists() and not (tmp_path / "pwned").exists()  # a path is data


def test_a_host_that_cannot_be_asked_reports_nothing_missing(sshd: Sshd, tmp_path: Path, closed_port: int) -> None:
    """No answer is no evidence: unregistering on it would throw away adapters whose files are there."""
    checker = FileChecker(load_inventory(remote_inventory(sshd, tmp_path, port=closed_port)))
    try:
        assert checker.missing("gpu-1/e0", {"b": str(tmp_path / "gone")}) == []
    finally:
        checker.close()


def test_this_machine_is_loopback_by_any_spelling_or_its_own_name() -> None:
    for url in (
        "http://localhost:1",
        "http://LOCALHOST:1",
        "http://127.0.0.1:2",
        "http://127.1.2.3:2",
        "http://[::1]:3",
    ):
        assert runs_here(url), url
    assert runs_here(f"http://{socket.gethostname()}:8000")
    for url in ("http://10.0.0.5:1", "http://[::2]:1", "http://localhost.example:1", "not a url"):
        assert not runs_here(url), url


def test_a_local_files_check_speaks_only_for_engines_on_this_machine(tmp_path: Path, write_yaml) -> None:
    inv = load_inventory(write_yaml(
        MODELS + "hosts:\n  - name: h\n    provider: onprem\n    connection: local\n    engines:\n"
        "      - {name: here, kind: vllm, url: 'http://127.0.0.1:9', base_model: m}\n"
        "      - {name: away, kind: vllm, url: 'http://10.20.30.40:8000', base_model: m}\n"
    ))  # fmt: skip
    checker = FileChecker(inv)
    gone = {"a": str(tmp_path / "nowhere"), "b": str(tmp_path)}
    assert checker.missing("h/here", gone) == ["a"]
    assert checker.missing("h/away", gone) == []  # this machine's disk says nothing of another's
    checker.close()
