"""`inventory show` and `inventory check`: which columns the narrow tables show, what the wide rows say, and
where the warnings go."""

from __future__ import annotations

from tests.conftest import INVENTORIES
from tests.tables import by_first, headers

REFERENCE = str(INVENTORIES / "reference.yaml")
DEMO = str(INVENTORIES / "demo.yaml")


def test_the_narrow_tables_show_only_their_narrow_columns_and_say_wide_shows_the_rest(run_cli) -> None:
    narrow = run_cli("inventory", "show", "-i", REFERENCE, env={"COLUMNS": "200"})
    assert narrow.exit_code == 0, narrow.stderr
    assert headers(narrow.stdout) == [
        ["host", "provider", "address", "GPUs", "engines"],
        ["engine", "kind", "base model", "slots", "budget"],
        ["group", "kind", "engines"],
        ["adapter", "base model", "rank", "size", "size from"],
    ]
    assert "--wide shows every column (URLs, ranks, groups, tenants)" in narrow.stdout
    wide = run_cli("inventory", "show", "-i", REFERENCE, "--wide", env={"COLUMNS": "250"})
    assert wide.exit_code == 0, wide.stderr
    assert "--wide shows every column" not in wide.stdout
    assert headers(wide.stdout) == [
        ["host", "provider", "group", "connection", "address", "GPUs", "engines"],
        ["engine", "kind", "base model", "GPUs", "slots", "max rank", "budget", "url"],
        ["group", "namespace", "selector", "port", "kind", "base model", "engines"],
        ["adapter", "base model", "rank", "modules", "size", "size from", "tenants"],
    ]


def test_the_wide_rows_show_each_field_or_its_placeholder(run_cli) -> None:
    wide = run_cli("inventory", "show", "-i", REFERENCE, "--wide", env={"COLUMNS": "250"})
    assert wide.exit_code == 0, wide.stderr
    table = by_first(wide.stdout)
    # group given, address = the name ("-"); no group ("-"), an address of its own
    dgx = "dgx-01.dc1.acme.internal"
    assert table[dgx] == [dgx, "onprem", "onprem-dgx", "ssh", "-", "8", "2"]
    assert table["aws-p4d-use1-1"] == ["aws-p4d-use1-1", "aws", "-", "ssh", "10.20.1.15", "8", "1"]
    assert table["dgx-01.dc1.acme.internal/vllm-a"][3] == "0,1,2,3"  # the engine's GPUs
    assert table["gke-vllm-pool"][1:4] == ["inference", "kubernetes.io/service-name=vllm-llama3", "http:http"]
    assert table["code-llama3-r64"][6] == "globex-dev, initech"  # the adapter's tenants
    demo = by_first(run_cli("inventory", "show", "-i", DEMO, "--wide", env={"COLUMNS": "250"}).stdout)
    assert demo["localhost/vllm-0"][3] == "-"  # an engine without GPU indexes


def test_show_writes_the_inventorys_warnings_to_stderr_not_into_the_tables(write_yaml, run_cli) -> None:
    inv = write_yaml(
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - {name: h, provider: aws, engines: [{name: e, kind: vllm, url: 'http://h:1', base_model: m}]}\n"
        "adapters:\n  - {id: big, base_model: m, path: /big, rank: 64}\n"
    )
    for command in ("check", "show"):
        result = run_cli("inventory", command, "-i", str(inv))
        assert result.exit_code == 0, result.stderr
        assert "warning: adapter big: rank 64 exceeds max_lora_rank on every engine of m" in result.stderr
        assert "warning:" not in result.stdout, command
