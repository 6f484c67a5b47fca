"""Which hosts a probe takes (name pattern, provider, group, all at once), and each engine's share of its host's
GPUs: a sum only when every GPU it owns was read, never a partial figure that understates what is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.errors import InputError
from lorafleet.inventory import load_inventory
from lorafleet.probe.snapshot import GpuInfo, HostVram
from lorafleet.probe.survey import HostFilter, by_engine, probe_fleet, select_hosts

GIB = 2**30
INVENTORY = """\
base_models:
  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}
groups:
  dgx:
    provider: onprem
    hosts:
      dgx-[1:2]: {}
    engines:
      - {name: e, kind: vllm, url: 'http://{host}:8000', base_model: m, gpus: [0, 1]}
hosts:
  - {name: dgx-9, provider: onprem}
  - {name: aws-1, provider: aws, engines: [{name: f, kind: vllm, url: 'http://aws-1:1', base_model: m, gpus: [2]}]}
"""


def gpu(index: int, free_gib: int | None) -> GpuInfo:
    return GpuInfo(index, None, "H100", 80 * GIB, None, None if free_gib is None else free_gib * GIB, None)


def test_filters_take_hosts_by_pattern_provider_and_group_together(write_yaml) -> None:
    inv = load_inventory(write_yaml(INVENTORY))

    def names(**kw: str) -> list[str]:
        return [h.name for h in select_hosts(inv, HostFilter(**kw))]

    assert names() == ["dgx-1", "dgx-2", "dgx-9", "aws-1"]
    assert names(group="dgx") == ["dgx-1", "dgx-2"]
    assert names(pattern="dgx-*") == ["dgx-1", "dgx-2", "dgx-9"]
    assert names(pattern="dgx-*", provider="onprem", group="dgx") == ["dgx-1", "dgx-2"]
    assert names(provider="aws") == ["aws-1"]
    with pytest.raises(InputError, match="no host in the inventory matches the filters"):
        names(provider="aws", group="dgx")
    with pytest.raises(InputError, match="--parallel must be at least 1"):
        probe_fleet(inv.hosts, inv, parallel=0)
    assert probe_fleet([], inv, parallel=1) == []  # one at a time is a pool too (nothing to probe here)


def test_an_engines_memory_is_summed_only_when_every_gpu_it_owns_was_read(write_yaml, tmp_path: Path) -> None:
    inv = load_inventory(write_yaml(INVENTORY))
    rows = [
        HostVram("dgx-1", "onprem", "ok", gpus=(gpu(0, 10), gpu(1, 20), gpu(2, 70))),
        HostVram("dgx-2", "onprem", "ok", gpus=(gpu(0, 10),)),  # GPU 1 not listed
        HostVram("aws-1", "aws", "timeout"),
    ]
    got = {e.engine: (e.status, e.total_bytes, e.free_bytes) for e in by_engine(inv, rows)}
    assert got == {
        "dgx-1/e": ("ok", 160 * GIB, 30 * GIB),  # GPU 2 is not the engine's
        "dgx-2/e": ("ok", None, None),
        "aws-1/f": ("timeout", None, None),
    }  # dgx-9, not probed, has no row
    unknown = [HostVram("dgx-1", "onprem", "ok", gpus=(gpu(0, 10), gpu(1, None)))]
    assert [(e.total_bytes, e.free_bytes) for e in by_engine(inv, unknown)] == [(160 * GIB, None)]
