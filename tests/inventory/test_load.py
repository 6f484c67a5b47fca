"""Valid inventories resolve as an admin would expect: ranges, inheritance, substitution, folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.errors import InventoryError
from lorafleet.inventory import load_inventory
from lorafleet.inventory.ranges import expand_hostname
from tests.conftest import INVENTORIES


def test_reference_inventory_is_accepted_as_is() -> None:
    for path in [INVENTORIES / "reference.yaml"]:  # the project's reference inventory, kept verbatim here
        inv = load_inventory(path)
        assert inv.fleet == "acme-prod"
        assert [h.name for h in inv.hosts[:4]] == [f"dgx-0{i}.dc1.acme.internal" for i in range(1, 5)]
        assert len(inv.engines) == 14
        assert inv.adapters["finance-llama3-sec-filings-r128"].size_bytes == 671_088_640


@pytest.mark.parametrize("path", sorted(INVENTORIES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_inventory_passes_check(path: Path, run_cli) -> None:
    result = run_cli("inventory", "check", "-i", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"ok: {path}")


def test_inheritance_defaults_group_host_engine() -> None:
    inv = load_inventory(INVENTORIES / "reference.yaml")
    dgx = inv.host("dgx-03.dc1.acme.internal")
    assert dgx is not None
    # ssh: user from the group, port/key/timeout from defaults, jump from the group
    assert (dgx.ssh.user, dgx.ssh.port, dgx.ssh.key, dgx.ssh.jump, dgx.ssh.connect_timeout_s) == (
        "svc-lorafleet",
        22,
        "~/.ssh/id_ed25519",
        "bastion.dc1.acme.internal",
        5.0,
    )
    vllm = inv.engine("dgx-03.dc1.acme.internal/vllm-a")
    assert vllm is not None
    assert vllm.url == "http://dgx-03.dc1.acme.internal:8000"
    assert (vllm.gpu_slots, vllm.host_slots, vllm.max_lora_rank, vllm.lora_budget_bytes) == (8, 32, 128, 4 << 30)
    assert (vllm.load.load_fixed_ms, vllm.load.disk_gbps, vllm.load.h2d_gbps) == (15, 3, 25)
    runpod = inv.host("runpod-a100-1")
    assert runpod is not None and (runpod.ssh.user, runpod.ssh.port) == ("root", 22014)
    gcp = inv.engine("gcp-a3-usc1-1/vllm-0")
    assert gcp is not None and gcp.max_lora_rank == 16  # vLLM's own default when unset
    sglang = inv.engine("azure-nd-h100-1/sglang-0")
    assert sglang is not None and (sglang.gpu_slots, sglang.host_slots, sglang.max_lora_rank) == (4, 16, None)


def test_host_override_inside_group_and_engine_tuning(write_yaml) -> None:
    inv = load_inventory(
        write_yaml(
            "defaults: {provider: onprem, disk_gbps: 2, ssh: {user: a, port: 2200}}\n"
            "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
            "groups:\n  g:\n    gpus: 4\n    h2d_gbps: 50\n    ssh: {user: b}\n"
            "    hosts:\n      n[08:10]: {address: '{host}.lan'}\n      special: {gpus: 8, ssh: {port: 2222}}\n"
            "    engines:\n      - {name: e, kind: sglang, url: 'http://{host}:30000/', base_model: m, disk_gbps: 9}\n"
        )
    )
    assert [h.name for h in inv.hosts] == ["n08", "n09", "n10", "special"]
    assert [h.address for h in inv.hosts] == ["n08.lan", "n09.lan", "n10.lan", "special"]
    assert inv.hosts[0].engines[0].url == "http://n08.lan:30000"
    assert (inv.hosts[3].gpus, inv.hosts[3].ssh.user, inv.hosts[3].ssh.port) == (8, "b", 2222)
    load = inv.hosts[0].engines[0].load
    assert (load.disk_gbps, load.h2d_gbps) == (9, 50)
    sglang = inv.hosts[0].engines[0]
    assert (sglang.gpu_slots, sglang.host_slots) == (8, None)  # SGLang defaults: 8 per batch, no host cap


def test_folder_of_files_is_merged(tmp_path: Path) -> None:
    (tmp_path / "00-models.yaml").write_text(
        "fleet: f\nbase_models:\n"
        "  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
    )
    (tmp_path / "10-east.yaml").write_text(
        "hosts:\n  - {name: east-1, provider: aws, engines: [{name: e, kind: vllm, url: 'http://{host}:1', "
        "base_model: m}]}\nadapters:\n  - {id: a, base_model: m, path: /a, rank: 8}\n"
    )
    (tmp_path / "20-west.yaml").write_text(
        "fleet: f\nhosts:\n  - {name: west-1, provider: gcp}\n"
        "adapters:\n  - {id: b, base_model: m, path: /b, rank: 8}\n"
    )
    (tmp_path / "notes.txt").write_text("ignored")
    inv = load_inventory(tmp_path)
    assert [h.name for h in inv.hosts] == ["east-1", "west-1"]
    assert list(inv.adapters) == ["a", "b"]
    assert len(inv.sources) == 3


def test_yaml_anchors_and_merge_keys(write_yaml) -> None:
    inv = load_inventory(
        write_yaml(
            "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
            "hosts:\n  - name: h\n    provider: aws\n    engines:\n"
            "      - &e {name: a, kind: vllm, url: 'http://h:1', base_model: m, max_loras: 2}\n"
            "      - {<<: *e, name: b, url: 'http://h:2'}\n"
        )
    )
    assert [(e.name, e.url, e.gpu_slots) for e in inv.engines] == [("a", "http://h:1", 2), ("b", "http://h:2", 2)]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("dgx-[01:03]", ["dgx-01", "dgx-02", "dgx-03"]),
        ("n[8:10]", ["n8", "n9", "n10"]),
        ("n[08:10].dc", ["n08.dc", "n09.dc", "n10.dc"]),
        ("r[1:2]-n[1:2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("plain", ["plain"]),
    ],
)
def test_host_ranges(pattern: str, expected: list[str]) -> None:
    assert expand_hostname(pattern) == expected


@pytest.mark.parametrize(
    "pattern",
    ["n[3:1]", "n[1-3]", "n[1:3", "n]", "r[1:2]x]y[3:4]", "n[0:99999]", "r[1:200]-n[1:200]", "n[0:999999999999999]"],
)
def test_bad_host_ranges(pattern: str) -> None:
    with pytest.raises(ValueError):
        expand_hostname(pattern)


def test_a_folder_merges_sections_equal_defaults_agree_and_each_value_keeps_its_file_and_line(tmp_path: Path) -> None:
    """Mappings merge key by key across files (base models here), gateway logs concatenate, a default set
    alike in two files is no conflict, and a value from the second file is still located in that file."""
    models = "  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
    (tmp_path / "a.yaml").write_text(
        "defaults:\n  disk_gbps: 5\nbase_models:\n" + models + "hosts:\n  - {name: h, provider: aws, engines: "
        "[{name: e, kind: vllm, url: 'http://h:1', base_model: m}]}\n"
        "gateway:\n  logs:\n    - {path: /l/a.jsonl, format: jsonl, fields: {adapter: model}}\n"
    )
    (tmp_path / "b.yaml").write_text(
        "defaults:\n  disk_gbps: 5\nbase_models:\n  n: {hidden_size: 64, intermediate_size: 128, num_layers: 2,"
        " num_attention_heads: 4}\ngateway:\n  logs:\n"
        "    - {path: /l/b.jsonl, format: jsonl, fields: {adapter: model}}\n"
    )
    inv = load_inventory(tmp_path)
    assert sorted(inv.base_models) == ["m", "n"]
    assert [s.path for s in inv.gateway_logs] == ["/l/a.jsonl", "/l/b.jsonl"]
    assert inv.hosts[0].engines[0].load.disk_gbps == 5

    (tmp_path / "b.yaml").write_text(
        "base_models:\n\n\n  n: {hidden_size: -1, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "  o: 5\n"
    )
    with pytest.raises(InventoryError) as caught:
        load_inventory(tmp_path)
    assert [(Path(p.file).name, p.line, p.path) for p in caught.value.problems] == [
        ("b.yaml", 4, "base_models.n.hidden_size"),
        ("b.yaml", 5, "base_models.o"),
    ]

    (tmp_path / "b.yaml").write_text("defaults:\n  disk_gbps: 6\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(tmp_path)
    (problem,) = caught.value.problems
    assert (Path(problem.file).name, problem.line, problem.path) == ("b.yaml", 2, "defaults.disk_gbps")
    assert "conflicts with the one defined at" in problem.message and "a.yaml:2" in problem.message


def test_version_1_is_this_format(write_yaml) -> None:
    inv = load_inventory(write_yaml((INVENTORIES / "demo.yaml").read_text().replace("fleet:", "version: 1\nfleet:", 1)))
    assert inv.engines


def test_empty_sections_an_admin_left_in_a_template_are_nothing_not_errors(write_yaml) -> None:
    """`gateway:`, `tenants:` and a tenant with nothing under it are written as YAML nulls."""
    models = "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
    inv = load_inventory(write_yaml(models + "gateway:\ntenants:\n"))
    assert (inv.gateway_logs, inv.tenants) == ((), {})
    assert list(load_inventory(write_yaml(models + "tenants:\n  t:\n")).tenants) == ["t"]


def test_a_load_with_no_fixed_cost_is_allowed(write_yaml) -> None:
    text = (INVENTORIES / "demo.yaml").read_text()
    inv = load_inventory(write_yaml(text.replace("\n  load_fixed_ms: 15\n", "\n  load_fixed_ms: 0\n", 1)))
    assert {e.load.load_fixed_ms for e in inv.engines} == {0.0}


def test_the_load_time_model_reads_from_disk_then_copies_and_a_warm_adapter_pays_the_copy_only() -> None:
    """As the reference inventory's defaults say: fixed overhead + size / disk rate + size / host-to-device rate."""
    from lorafleet.inventory.model import LoadModel

    load = LoadModel(load_fixed_ms=15.0, disk_gbps=3.0, h2d_gbps=25.0)
    size = 300_000_000  # 300 MB: 100 ms from disk at 3 GB/s, 12 ms to the GPU at 25 GB/s
    assert load.copy_ms(size) == pytest.approx(12.0)
    assert load.cold_ms(size) == pytest.approx(15.0 + 100.0 + 12.0)


def test_the_last_port_number_is_a_port(write_yaml) -> None:
    text = (INVENTORIES / "demo.yaml").read_text()
    host = text.index("\n  - name: ")
    inv = load_inventory(
        write_yaml(text[:host] + text[host:].replace("\n    provider:", "\n    ssh: {port: 65535}\n    provider:", 1))
    )
    assert inv.hosts[0].ssh.port == 65535
