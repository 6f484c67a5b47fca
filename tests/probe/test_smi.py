"""The nvidia-smi CSV parser copes with placeholders, spacing and zero GPUs."""

from __future__ import annotations

import pytest

from lorafleet.probe.smi import SmiParseError, parse_nvidia_smi, smi_command
from lorafleet.units import MIB
from tests.sshd_server import CANNED_CSV


def test_canned_output_with_mig_and_placeholders() -> None:
    gpus = parse_nvidia_smi(CANNED_CSV)
    assert [g.index for g in gpus] == [0, 1, 2]
    assert (gpus[0].total_bytes, gpus[0].used_bytes, gpus[0].free_bytes) == (81559 * MIB, 1024 * MIB, 80535 * MIB)
    assert (gpus[0].mig, gpus[1].mig) == ("Disabled", "Enabled")
    assert gpus[2].name == "NVIDIA A100-SXM4-40GB"
    assert (gpus[2].total_bytes, gpus[2].used_bytes, gpus[2].free_bytes, gpus[2].mig) == (None, None, None, None)


@pytest.mark.parametrize("text", ["", "\n\n", "No devices were found\n"])
def test_zero_gpus(text: str) -> None:
    assert parse_nvidia_smi(text) == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "expected 7"),
        ("0, GPU-x, H100, 80GB, 1, 2, Disabled", "memory.total '80GB' is not a number"),
        ("zero, GPU-x, H100, 1, 1, 0, Disabled", "GPU index 'zero'"),
        ("0, GPU-x, H100, 1, -1, 0, Disabled", "negative"),
        ("0, GPU-x, H100, nan, 1, 0, Disabled", "memory.total 'nan' is not a finite number"),  # a host down
        ("0, GPU-x, H100, 1e400, 1, 0, Disabled", "memory.total '1e400' is not a finite number"),  # (unreachable)
        (f"0, GPU-x, H100, 1{'0' * 300}, 1, 0, Disabled", r"memory.total '1000.*' is more memory than any GPU"),
        (f"{'9' * 300}, GPU-x, H100, 1, 1, 0, Disabled", "GPU index '9999.*' is not a small whole number"),
        ("1000000, GPU-x, H100, 1, 1, 0, Disabled", "GPU index '1000000' is not a small whole number"),
        ("0, GPU-x, H100, [oops, 1, 0, Disabled", r"memory.total '\[oops' is not a number of MiB"),
        ("0, GPU-x, H100, 1073741825, 1, 0, Disabled", "memory.total '1073741825' is more memory than any GPU"),
        ("0, GPU-x, H100, 1, 1, 0, Disabled\n\n1, GPU-y, H100, 1, -0.5, 0, Disabled", "^line 3: memory.used '-0.5' is"),
    ],
)
def test_garbage_is_a_parse_error(text: str, words: str) -> None:
    with pytest.raises(SmiParseError, match=words):
        parse_nvidia_smi(text)


def test_query_command() -> None:
    assert smi_command("/opt/nv/nvidia-smi") == (
        "/opt/nv/nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,mig.mode.current "
        "--format=csv,noheader,nounits"
    )


def test_the_edges_of_what_a_gpu_can_say() -> None:
    """No memory used, a pebibyte of it (the most taken), a six-digit index, a placeholder in brackets."""
    (gpu,) = parse_nvidia_smi("999999, [N/A], [Unknown Error], 1073741824, 0, 1073741824, [N/A]")
    assert (gpu.index, gpu.uuid, gpu.name, gpu.mig) == (999999, None, None, None)
    assert (gpu.total_bytes, gpu.used_bytes, gpu.free_bytes) == (2**50, 0, 2**50)
