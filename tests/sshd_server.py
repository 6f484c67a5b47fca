"""A real OpenSSH sshd on 127.0.0.1 with throwaway keys and a fake nvidia-smi on its PATH.

Used by the SSH tests and by benchmarks/probe_fleet.py. Nothing here leaves the loopback interface.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"

CANNED_CSV = """\
0, GPU-0a1b2c3d-0000-1111-2222-333344445555, NVIDIA H100 80GB HBM3, 81559, 1024, 80535, Disabled
1, GPU-0a1b2c3d-0000-1111-2222-333344445556, NVIDIA H100 80GB HBM3, 81559, 40960, 40599, Enabled
2,GPU-0a1b2c3d-0000-1111-2222-333344445557,   NVIDIA A100-SXM4-40GB  , [N/A], [N/A], [N/A], [Not Supported]
"""

FAKE_SMI = """#!/bin/sh
case "$*" in
  *--format=csv,noheader,nounits*) cat "$(dirname "$0")/gpus.csv" ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sshd_available() -> bool:
    return os.path.exists(SSHD) and shutil.which("ssh-keygen") is not None


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class Sshd:
    root: Path
    port: int
    client_key: Path
    other_key: Path
    host_pub: str
    proc: subprocess.Popen[bytes]
    user: str

    def known_hosts_line(self, host: str = "127.0.0.1") -> str:
        kind, blob = self.host_pub.split()[:2]
        name = host if self.port == 22 else f"[{host}]:{self.port}"
        return f"{name} {kind} {blob}\n"

    def write_known_hosts(self, path: Path, host: str = "127.0.0.1") -> Path:
        path.write_text(self.known_hosts_line(host))
        return path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_sshd(root: Path) -> Sshd:
    """Start sshd in the foreground on a free loopback port; waits until it accepts connections."""
    root.mkdir(parents=True, exist_ok=True)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (root / "home").mkdir(exist_ok=True)
    (bin_dir / "gpus.csv").write_text(CANNED_CSV)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    slow = bin_dir / "slow-nvidia-smi"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    empty = bin_dir / "no-gpu-nvidia-smi"
    empty.write_text("#!/bin/sh\necho 'No devices were found'\n")
    garbage = bin_dir / "garbage-nvidia-smi"
    garbage.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate'\n")
    for script in (smi, slow, empty, garbage):
        script.chmod(0o755)
    host_pub = keygen(root / "host_ed25519")
    client_pub = keygen(root / "client_ed25519")
    keygen(root / "other_ed25519")
    (root / "authorized_keys").write_text(client_pub + "\n")
    port = free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_ed25519'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
        "StrictModes no\nUsePAM no\nAllowTcpForwarding yes\nMaxStartups 500\nMaxSessions 100\nLogLevel ERROR\n"
        # A HOME of its own keeps the session shell off the real user's ~/.bashrc (slow, and not ours to run).
        f"SetEnv PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin HOME={root / 'home'}\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    log = (root / "sshd.log").open("wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(root / 'sshd.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        raise RuntimeError("sshd did not start listening within 10s")
    import getpass

    return Sshd(root, port, root / "client_ed25519", root / "other_ed25519", host_pub, proc, getpass.getuser())
