"""A real sshd for the SSH tests (one per test session) and inventories that point at it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.sshd_server import Sshd, free_port, sshd_available, start_sshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if not sshd_available():
        if os.environ.get("CI"):
            pytest.fail("CI must install openssh-server (see .ci/run)")
        pytest.skip("OpenSSH sshd is not installed here")
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the keys a test names may authenticate."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture
def closed_port() -> int:
    return free_port()


@pytest.fixture
def ssh_inventory(sshd: Sshd, tmp_path: Path) -> Callable[..., Path]:
    """Write an inventory of hosts on the test sshd; each host dict may override ssh settings or nvidia_smi."""

    def write(
        hosts: list[dict[str, object]] | None = None,
        known_hosts: Path | None = None,
        key: Path | None = None,
        extra: str = "",
    ) -> Path:
        known = known_hosts or sshd.write_known_hosts(tmp_path / "known_hosts")
        lines = [
            "defaults:",
            "  provider: onprem",
            "  ssh:",
            f"    user: {sshd.user}",
            f"    port: {sshd.port}",
            f"    key: {key or sshd.client_key}",
            f"    known_hosts: {known}",
            f"    config: {tmp_path / 'no-ssh-config'}",
            "    connect_timeout_s: 5",
            "    command_timeout_s: 10",
            "hosts:",
        ]
        for h in hosts or [{"name": "gpu-1"}]:
            lines.append(f"  - name: {h['name']}")
            lines.append(f"    address: {h.get('address', '127.0.0.1')}")
            for k in ("nvidia_smi", "gpus", "connection", "provider"):
                if k in h:
                    lines.append(f"    {k}: {h[k]}")
            if "ssh" in h:
                lines.append(f"    ssh: {h['ssh']}")
        path = tmp_path / "ssh-inventory.yaml"
        path.write_text("\n".join(lines) + "\n" + extra)
        return path

    return write
