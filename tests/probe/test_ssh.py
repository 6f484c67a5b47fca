"""`lorafleet vram` against a real sshd on 127.0.0.1: every status, jump hosts, ssh_config, parallelism."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lorafleet.inventory import load_inventory
from lorafleet.probe.survey import probe_fleet
from lorafleet.units import MIB
from tests.conftest import interruptible
from tests.sshd_server import Sshd, keygen


def vram_json(run_cli, inventory: Path, *args: str) -> tuple[int, dict[str, dict]]:
    result = run_cli("vram", "--json", "-i", str(inventory), *args)
    assert "Traceback" not in result.stdout + result.stderr
    hosts = {h["name"]: h for h in json.loads(result.stdout)["hosts"]}
    return result.exit_code, hosts


def test_ok_host_reports_gpus_in_bytes_and_dead_host_is_marked(ssh_inventory, run_cli, closed_port) -> None:
    inv = ssh_inventory([{"name": "gpu-1"}, {"name": "dead-1", "ssh": f"{{port: {closed_port}}}"}])
    code, hosts = vram_json(run_cli, inv)
    assert code == 1
    live, dead = hosts["gpu-1"], hosts["dead-1"]
    assert live["status"] == "ok" and live["error"] is None
    assert live["gpus"][0] == {
        "index": 0,
        "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555",
        "name": "NVIDIA H100 80GB HBM3",
        "total_bytes": 81559 * MIB,
        "used_bytes": 1024 * MIB,
        "free_bytes": 80535 * MIB,
        "mig": "Disabled",
    }
    assert live["gpus"][1]["mig"] == "Enabled" and live["gpus"][1]["used_bytes"] == 40960 * MIB
    assert live["gpus"][2]["total_bytes"] is None and live["gpus"][2]["mig"] is None
    assert dead["status"] == "unreachable" and "connection refused" in dead["error"] and dead["gpus"] == []


def test_all_ok_exits_zero_and_renders_a_table(ssh_inventory, run_cli) -> None:
    result = run_cli("vram", "-i", str(ssh_inventory()))
    assert result.exit_code == 0, result.stdout + result.stderr
    for words in ("gpu-1", "78.6 GiB"):
        assert words in result.stdout
    wide = run_cli("vram", "-i", str(ssh_inventory()), "--wide")
    for words in ("gpu-1", "NVIDIA H100 80GB HBM3", "78.6 GiB", "Enabled"):  # the GPU's name and MIG mode too
        assert words in wide.stdout


def test_wrong_client_key_is_auth_failed(ssh_inventory, run_cli, sshd: Sshd) -> None:
    code, hosts = vram_json(run_cli, ssh_inventory(key=sshd.other_key))
    assert code == 1 and hosts["gpu-1"]["status"] == "auth-failed"
    assert hosts["gpu-1"]["error"].endswith(f": authentication failed ({sshd.other_key})")  # the key it tried


def test_unknown_host_key_refused_then_accepted_with_flag(ssh_inventory, run_cli, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"  # its folder made on accepting, private as OpenSSH's ~/.ssh
    inv = ssh_inventory(known_hosts=known)
    code, hosts = vram_json(run_cli, inv)
    assert code == 1 and hosts["gpu-1"]["status"] == "host-key-unknown"
    assert "--accept-new-host-keys" in hosts["gpu-1"]["error"] and "SHA256:" in hosts["gpu-1"]["error"]
    assert not known.exists()

    code, hosts = vram_json(run_cli, inv, "--accept-new-host-keys")
    assert code == 0 and hosts["gpu-1"]["status"] == "ok"
    assert "ssh-ed25519" in known.read_text() and known.parent.stat().st_mode & 0o777 == 0o700

    code, hosts = vram_json(run_cli, inv)  # recorded: now known without the flag
    assert code == 0


def test_a_host_key_accepted_into_a_file_whose_last_line_has_no_newline_starts_a_line_of_its_own(
    ssh_inventory, run_cli, tmp_path: Path
) -> None:
    """Glued to the last line, the new entry and that line both fail to parse: paramiko refuses the whole file."""
    known = tmp_path / "known_hosts"
    other = keygen(tmp_path / "other").split()
    known.write_text(f"otherhost {other[0]} {other[1]}")  # no newline at the end
    inv = ssh_inventory(known_hosts=known)
    code, hosts = vram_json(run_cli, inv, "--accept-new-host-keys")
    assert code == 0 and hosts["gpu-1"]["status"] == "ok"
    lines = known.read_text().splitlines()
    assert lines[0] == f"otherhost {other[0]} {other[1]}" and lines[1].split()[1] == "ssh-ed25519"
    code, hosts = vram_json(run_cli, inv)  # the file still loads, the new key with it
    assert code == 0, hosts


def test_changed_host_key_is_always_refused(ssh_inventory, run_cli, sshd: Sshd, tmp_path: Path) -> None:
    impostor = keygen(tmp_path / "impostor").split()
    known = tmp_path / "known_hosts_changed"
    known.write_text(f"[127.0.0.1]:{sshd.port} {impostor[0]} {impostor[1]}\n")
    for flags in ((), ("--accept-new-host-keys",)):
        code, hosts = vram_json(run_cli, ssh_inventory(known_hosts=known), *flags)
        assert code == 1 and hosts["gpu-1"]["status"] == "host-key-mismatch"
        assert "changed" in hosts["gpu-1"]["error"]


def test_command_past_its_timeout(ssh_inventory, run_cli) -> None:
    inv = ssh_inventory([{"name": "slow", "nvidia_smi": "slow-nvidia-smi", "ssh": "{command_timeout_s: 1}"}])
    started = time.monotonic()
    code, hosts = vram_json(run_cli, inv)
    assert code == 1 and hosts["slow"]["status"] == "timeout"
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("smi", "status", "words"),
    [
        ("nvidia-smi-not-installed", "command-failed", "exited 127"),
        ("garbage-nvidia-smi", "parse-error", "expected 7 comma-separated fields"),
    ],
)
def test_remote_command_failures(ssh_inventory, run_cli, smi: str, status: str, words: str) -> None:
    code, hosts = vram_json(run_cli, ssh_inventory([{"name": "h", "nvidia_smi": smi}]))
    assert code == 1 and hosts["h"]["status"] == status and words in hosts["h"]["error"]


def test_output_past_4_mib_is_refused_not_read_on(ssh_inventory, run_cli) -> None:
    """A command gone wrong on a host could print without end: at most 4 MiB is read (stdout and stderr). Read
    to its end: the exit status can come before the last of the output (this test read a part and parsed it, one
    run in two, while the loop ended at the exit status)."""
    at, past = (f'"yes | head -c {n}; true"' for n in (4 * 2**20, 4 * 2**20 + 1))
    inv = ssh_inventory([{"name": "at", "nvidia_smi": at}, {"name": "past", "nvidia_smi": past}])
    code, hosts = vram_json(run_cli, inv)
    assert code == 1 and hosts["at"]["status"] == "parse-error"  # read whole, then not nvidia-smi's output
    assert (hosts["past"]["status"], hosts["past"]["error"]) == ("command-failed", "yes: output larger than 4 MiB")


def test_host_without_gpus_is_ok(ssh_inventory, run_cli) -> None:
    code, hosts = vram_json(run_cli, ssh_inventory([{"name": "cpu-only", "nvidia_smi": "no-gpu-nvidia-smi"}]))
    assert code == 0 and hosts["cpu-only"]["gpus"] == []


def test_ctrl_c_during_a_slow_command_exits_at_once_with_the_json_error(ssh_inventory, tmp_path: Path) -> None:
    """The in-flight probes end with their closed connections; waiting for them held the exit for the whole
    command timeout (30 s by default)."""
    import os
    import signal
    import subprocess
    import sys

    inv = ssh_inventory([{"name": "slow", "nvidia_smi": "slow-nvidia-smi"}])
    inv.write_text(inv.read_text().replace("command_timeout_s: 10", "command_timeout_s: 60"))
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorafleet", "vram", "-i", str(inv), "--json"],
        env={**os.environ, "PYTHONPATH": str(root), "LORAFLEET_STATE": str(tmp_path / "s.db")},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=interruptible,
    )
    time.sleep(2.0)  # connected, `sleep 30` running on the host
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 5.0, err
    assert proc.returncode == 130 and "Traceback" not in err
    assert json.loads(out)["error"]["exit_code"] == 130


def test_jump_through_an_inventory_host(ssh_inventory, run_cli) -> None:
    inv = ssh_inventory([{"name": "bastion"}, {"name": "behind", "address": "127.0.0.1", "ssh": "{jump: bastion}"}])
    code, hosts = vram_json(run_cli, inv)
    assert code == 0 and len(hosts["behind"]["gpus"]) == 3


def test_an_inventory_host_used_as_a_jump_host_is_reached_by_its_own_route(ssh_inventory, run_cli, closed_port) -> None:
    """bastion is reached only through its own jump (here a dead one): a host behind it must not be reached by
    connecting to bastion directly, a route the inventory does not declare."""
    inv = ssh_inventory(
        [
            {"name": "bastion", "ssh": f"{{jump: '127.0.0.1:{closed_port}'}}"},
            {"name": "inner", "address": "127.0.0.1", "ssh": "{jump: bastion}"},
        ]
    )
    code, hosts = vram_json(run_cli, inv)
    assert code == 1 and hosts["bastion"]["status"] == hosts["inner"]["status"] == "unreachable", hosts


def test_a_jump_list_is_taken_in_openssh_order(tmp_path: Path) -> None:
    """`-J a,b`: a first, b through a, the target through b."""
    from lorafleet.inventory.model import SshSettings
    from lorafleet.probe.ssh import resolve_target

    target = resolve_target("t", SshSettings(jump="a,u@b:2222", config=str(tmp_path / "none")))
    assert target.jump is not None and (target.jump.alias, target.jump.user, target.jump.port) == ("b", "u", 2222)
    assert target.jump.jump is not None and target.jump.jump.alias == "a" and target.jump.jump.jump is None


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("u@[fd00::1]:2222", ("fd00::1", "u", 2222)),
        ("[fd00::1]", ("fd00::1", "me", 22)),
        ("[fd00::1]:ssh", ("fd00::1", "me", 22)),
        ("bastion:2200", ("bastion", "me", 2200)),
        ("ops@bastion", ("bastion", "ops", 22)),
    ],
)
def test_a_jump_is_read_as_openssh_writes_it(tmp_path: Path, spec: str, want: tuple[str, str, int]) -> None:
    from lorafleet.inventory.model import SshSettings
    from lorafleet.probe.ssh import resolve_target

    jump = resolve_target("t", SshSettings(user="me", jump=spec, config=str(tmp_path / "none"))).jump
    assert jump is not None and (jump.alias, jump.user, jump.port) == want


def test_a_jump_chain_has_at_most_five_hops_and_a_password_is_never_shown(tmp_path: Path, monkeypatch) -> None:
    from lorafleet.inventory.model import SshSettings
    from lorafleet.probe.snapshot import ProbeError
    from lorafleet.probe.ssh import resolve_target

    none = str(tmp_path / "none")
    target = resolve_target("t", SshSettings(jump="h1,h2,h3,h4,h5", config=none))
    hops = []
    while target.jump is not None:
        target = target.jump
        hops.append(target.alias)
    assert hops == ["h5", "h4", "h3", "h2", "h1"]
    with pytest.raises(ProbeError, match="jump chain to h1 is longer than 5 hops"):
        resolve_target("t", SshSettings(jump="h1,h2,h3,h4,h5,h6", config=none))
    monkeypatch.setenv("SSH_PW", "hunter2-secret")
    target = resolve_target("t", SshSettings(password_env="SSH_PW", config=none))
    assert target.password == "hunter2-secret" and "hunter2" not in repr(target) + str(target)


def test_jump_by_address_and_dead_target_behind_it(ssh_inventory, run_cli, sshd: Sshd, closed_port) -> None:
    inv = ssh_inventory(
        [
            {"name": "via", "ssh": f"{{jump: '{sshd.user}@127.0.0.1:{sshd.port}'}}"},
            {"name": "gone", "ssh": f"{{jump: '127.0.0.1:{sshd.port}', port: {closed_port}}}"},
        ]
    )
    code, hosts = vram_json(run_cli, inv)
    assert code == 1
    assert hosts["via"]["status"] == "ok"
    assert hosts["gone"]["status"] == "unreachable" and "via jump host" in hosts["gone"]["error"]


def test_ssh_config_alias(sshd: Sshd, tmp_path: Path, run_cli) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-alias\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n"
    )
    known = sshd.write_known_hosts(tmp_path / "kh")
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "hosts:\n  - name: aliased\n    provider: onprem\n    address: gpu-alias\n"
        f"    ssh: {{config: {config}, known_hosts: {known}}}\n"
    )
    code, hosts = vram_json(run_cli, inv)
    assert code == 0, hosts
    assert len(hosts["aliased"]["gpus"]) == 3


def test_filters(ssh_inventory, run_cli) -> None:
    inv = ssh_inventory([{"name": "a-1"}, {"name": "a-2"}, {"name": "b-1", "provider": "aws"}])
    code, hosts = vram_json(run_cli, inv, "--host", "a-*")
    assert code == 0 and sorted(hosts) == ["a-1", "a-2"]
    code, hosts = vram_json(run_cli, inv, "--provider", "aws")
    assert sorted(hosts) == ["b-1"]
    result = run_cli("vram", "-i", str(inv), "--host", "zzz*")
    assert result.exit_code == 2 and "no host in the inventory matches" in result.stderr


def test_engine_view(ssh_inventory, run_cli) -> None:
    extra = "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
    inv = ssh_inventory([{"name": "gpu-1", "gpus": 3}], extra=extra)
    text = inv.read_text().replace(
        "    gpus: 3\n",
        "    gpus: 3\n    engines:\n      - {name: e0, kind: vllm, url: 'http://127.0.0.1:1', base_model: m, "
        "gpus: [0, 1]}\n",
    )
    inv.write_text(text)
    result = run_cli("vram", "--by", "engine", "-i", str(inv))
    assert result.exit_code == 0, result.stderr
    assert "gpu-1/e0" in result.stdout and "118.3 GiB" in result.stdout  # 80535 + 40599 MiB free


def test_fifty_hosts_in_parallel(ssh_inventory) -> None:
    one = load_inventory(ssh_inventory([{"name": "solo"}]))
    started = time.monotonic()
    assert probe_fleet(one.hosts, one)[0].ok
    single = time.monotonic() - started

    fleet = load_inventory(ssh_inventory([{"name": f"gpu-{i:02d}"} for i in range(50)]))
    started = time.monotonic()
    rows = probe_fleet(fleet.hosts, fleet, parallel=32)
    elapsed = time.monotonic() - started
    assert all(r.ok for r in rows), [r.error for r in rows if not r.ok]
    assert elapsed < 50 * single / 2, (elapsed, single)


def test_a_server_that_accepts_and_never_speaks_is_a_timeout(ssh_inventory, run_cli) -> None:
    from tests.engines.hostile import HostileServer

    with HostileServer("stall") as stall:
        port = stall.url.rsplit(":", 1)[1]
        inv = ssh_inventory([{"name": "stall-1", "ssh": f"{{port: {port}, connect_timeout_s: 1}}"}])
        began = time.monotonic()
        code, hosts = vram_json(run_cli, inv)
    assert code == 1 and hosts["stall-1"]["status"] == "timeout", hosts
    assert time.monotonic() - began < 15


def test_a_garbled_known_hosts_file_is_named(ssh_inventory, run_cli, tmp_path: Path) -> None:
    known = tmp_path / "garbled_known_hosts"
    known.write_bytes(b"127.0.0.1 ssh-ed25519 !!!not-base64!!!\n\x00\xff garbage\n")
    code, hosts = vram_json(run_cli, ssh_inventory(known_hosts=known))
    assert code == 1 and str(known) in (hosts["gpu-1"]["error"] or ""), hosts


def test_a_missing_key_file_is_named(ssh_inventory, run_cli, tmp_path: Path) -> None:
    missing = tmp_path / "no_such_key"
    code, hosts = vram_json(run_cli, ssh_inventory(key=missing))
    assert code == 1 and hosts["gpu-1"]["status"] == "auth-failed"
    assert f"key file {missing} not found" in hosts["gpu-1"]["error"]
