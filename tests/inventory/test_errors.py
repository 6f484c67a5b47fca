"""Malformed inventories: each error names file:line and the field path, all errors come together, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.errors import InventoryError
from lorafleet.inventory import load_inventory, yamlsource

BASE = """\
fleet: t
base_models:
  m1: {hidden_size: 4096, intermediate_size: 14336, num_layers: 32, num_attention_heads: 32, num_kv_heads: 8}
hosts:
  - name: h1
    provider: aws
    gpus: 2
    engines:
      - name: e1
        kind: vllm
        url: http://127.0.0.1:8000
        base_model: m1
        max_loras: 2
adapters:
  - id: a1
    base_model: m1
    path: /a/a1
    rank: 8
tenants:
  t1: {pinned: [a1]}
"""

SECOND_HOST = "  - name: h1\n    provider: aws\n    engines: []\n"
NGINX = (
    "gateway:\n  logs:\n    - path: /var/log/x.log\n      format: nginx\n"
    "      log_format: '$remote_addr [$time_local] \"$http_x_lora\"'\n"
    "      fields: {adapter: http_x_adapter}\n"
)


def edit(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


# (id, inventory text, line, field path, words in the message)
CASES = [
    (
        "typo-key",
        edit("        max_loras: 2", "        max_lora: 2"),
        13,
        "hosts[0].engines[0].max_lora",
        "did you mean 'max_loras'",
    ),
    (
        "duplicate-key",
        edit("        max_loras: 2", "        max_loras: 2\n        max_loras: 3"),
        14,
        "hosts[0].engines[0].max_loras",
        "duplicate key (first defined on line 13)",
    ),
    ("tab-indent", edit("    provider: aws", "\tprovider: aws"), 6, "", "tab in indentation"),
    (
        "engine-unknown-base-model",
        edit("        base_model: m1", "        base_model: m2"),
        12,
        "hosts[0].engines[0].base_model",
        "'m2' is not a base model in this inventory (known: m1)",
    ),
    (
        "adapter-unknown-base-model",
        edit("    base_model: m1\n    path", "    base_model: m9\n    path"),
        16,
        "adapters[0].base_model",
        "'m9' is not a base model",
    ),
    (
        "engine-kind",
        edit("        kind: vllm", "        kind: tgi"),
        10,
        "hosts[0].engines[0].kind",
        "unknown engine kind 'tgi' (known: vllm, sglang)",
    ),
    (
        "unknown-provider",
        edit("    provider: aws", "    provider: awz"),
        6,
        "hosts[0].provider",
        "unknown provider 'awz' (known: aws, gcp, azure",
    ),
    (
        "negative-budget",
        edit("        max_loras: 2", "        max_loras: 2\n        lora_budget_mb: -5"),
        14,
        "hosts[0].engines[0].lora_budget_mb",
        "must be greater than 0, got -5",
    ),
    (
        "budget-past-a-pebibyte",  # would overflow once turned into bytes
        edit("        max_loras: 2", "        max_loras: 2\n        lora_budget_mb: 1.0e+302"),
        14,
        "hosts[0].engines[0].lora_budget_mb",
        "must be at most 1,073,741,824, got 1e+302",
    ),
    (
        "infinite-budget",
        edit("        max_loras: 2", "        max_loras: 2\n        lora_budget_mb: .inf"),
        14,
        "hosts[0].engines[0].lora_budget_mb",
        "expected a finite number",
    ),
    (
        "zero-slots",
        edit("        max_loras: 2", "        max_loras: 0"),
        13,
        "hosts[0].engines[0].max_loras",
        "must be positive, got 0",
    ),
    ("bad-type", edit("    gpus: 2", "    gpus: eight"), 7, "hosts[0].gpus", "expected an integer, got 'eight'"),
    (
        "bool-as-int",
        edit("        max_loras: 2", "        max_loras: yes"),
        13,
        "hosts[0].engines[0].max_loras",
        "expected an integer, got a boolean",
    ),
    (
        "gpu-index-beyond",
        edit("        max_loras: 2", "        max_loras: 2\n        gpus: [0, 2]"),
        14,
        "hosts[0].engines[0].gpus[1]",
        "GPU index 2 is beyond this host's 2 GPUs",
    ),
    ("duplicate-host", edit("adapters:", SECOND_HOST + "adapters:"), 14, "", "duplicate host name 'h1'"),
    (
        "duplicate-engine",
        edit(
            "        max_loras: 2",
            "        max_loras: 2\n      - {name: e1, kind: vllm, url: 'http://127.0.0.1:8001', base_model: m1}",
        ),
        14,
        "",
        "duplicate engine name 'e1' on host 'h1'",
    ),
    (
        "duplicate-adapter",
        edit("tenants:", "  - {id: a1, base_model: m1, path: /x, rank: 8}\ntenants:"),
        19,
        "adapters[1].id",
        "duplicate adapter id 'a1'",
    ),
    (
        "pinned-unknown",
        edit("  t1: {pinned: [a1]}", "  t1: {pinned: [a2]}"),
        20,
        "tenants.t1.pinned[0]",
        "'a2' is not an adapter in this inventory",
    ),
    (
        "workflow-unknown",
        edit("  t1: {pinned: [a1]}", "  t1:\n    workflows:\n      - [a1, a3]"),
        22,
        "tenants.t1.workflows[0][1]",
        "'a3' is not an adapter",
    ),
    (
        "url-scheme",
        edit("        url: http://127.0.0.1:8000", "        url: ftp://127.0.0.1"),
        11,
        "hosts[0].engines[0].url",
        "is not an http:// or https:// URL",
    ),
    (
        "url-port",
        edit("        url: http://127.0.0.1:8000", "        url: http://127.0.0.1:99999"),
        11,
        "hosts[0].engines[0].url",
        "invalid port",
    ),
    (
        "url-placeholder",
        edit("        url: http://127.0.0.1:8000", "        url: 'http://{hots}:8000'"),
        11,
        "hosts[0].engines[0].url",
        "unknown placeholder {hots}",
    ),
    (
        "inline-api-key",
        edit("        max_loras: 2", "        max_loras: 2\n        api_key: sk-live-123"),
        14,
        "hosts[0].engines[0].api_key",
        "api_key_env",
    ),
    (
        "api-key-env-name",
        edit("        max_loras: 2", "        max_loras: 2\n        api_key_env: my-key"),
        14,
        "hosts[0].engines[0].api_key_env",
        "not an environment variable name",
    ),
    (
        "host-name-invalid",
        edit("  - name: h1", "  - name: h[1:2]-"),
        5,
        "hosts[0].name",
        "'h1-' is not a valid host name",
    ),
    (
        "load-fixed-negative",
        edit("        max_loras: 2", "        max_loras: 2\n        load_fixed_ms: -0.5"),
        14,
        "hosts[0].engines[0].load_fixed_ms",
        "must not be negative, got -0.5",
    ),
    ("range-reversed", edit("  - name: h1", "  - name: h[5:1]"), 5, "hosts[0].name", "5 is greater than 1"),
    ("range-malformed", edit("  - name: h1", "  - name: h[1-4]"), 5, "hosts[0].name", "expected [FIRST:LAST]"),
    (
        "cpu-loras-below-slots",
        edit("        max_loras: 2", "        max_loras: 2\n        max_cpu_loras: 1"),
        14,
        "hosts[0].engines[0].max_cpu_loras",
        "must be at least max_loras (2)",
    ),
    (
        "sglang-key-on-vllm",
        edit("        max_loras: 2", "        max_loras_per_batch: 2"),
        13,
        "hosts[0].engines[0].max_loras_per_batch",
        "on vllm use max_loras",
    ),
    (
        "vllm-rank-value",
        edit("        max_loras: 2", "        max_loras: 2\n        max_lora_rank: 24"),
        14,
        "hosts[0].engines[0].max_lora_rank",
        "vLLM accepts max_lora_rank 1, 8, 16",
    ),
    (
        "unknown-module",
        edit("    rank: 8", "    rank: 8\n    target_modules: [q_proj, qkv_proj]"),
        19,
        "adapters[0].target_modules",
        "unknown target module 'qkv_proj' (known: q_proj, k_proj",
    ),
    (
        "adapter-id-path",
        edit("  - id: a1", "  - id: ../../etc/passwd"),
        15,
        "adapters[0].id",
        "is not a valid adapter id",
    ),
    ("rank-zero", edit("    rank: 8", "    rank: 0"), 18, "adapters[0].rank", "must be positive"),
    (
        "adapter-tenant-unknown",
        edit("    rank: 8", "    rank: 8\n    tenants: [t2]"),
        19,
        "adapters[0].tenants[0]",
        "'t2' is not a tenant",
    ),
    (
        "missing-url",
        edit("        url: http://127.0.0.1:8000\n", ""),
        9,
        "hosts[0].engines[0]",
        "missing required key 'url'",
    ),
    *(  # every other key an engine, an adapter, a host or a base model cannot go without
        (f"missing-{where}-{key}", edit(old, new), line, path, f"missing required key '{key}'")
        for where, key, old, new, line, path in (
            ("engine", "name", "      - name: e1\n        kind", "      - kind", 9, "hosts[0].engines[0]"),
            ("engine", "kind", "        kind: vllm\n", "", 9, "hosts[0].engines[0]"),
            ("engine", "base_model", "        base_model: m1\n", "", 9, "hosts[0].engines[0]"),
            ("adapter", "id", "  - id: a1\n    base_model", "  - base_model", 15, "adapters[0]"),
            ("adapter", "base_model", "    base_model: m1\n    path", "    path", 15, "adapters[0]"),
            ("adapter", "path", "    path: /a/a1\n", "", 15, "adapters[0]"),
            ("host", "name", "  - name: h1\n    provider", "  - provider", 5, "hosts[0]"),
            ("base-model", "hidden_size", "{hidden_size: 4096, ", "{", 3, "base_models.m1"),
        )
    ),
    ("version", "version: 2\n" + BASE, 1, "version", "unsupported inventory version 2 (supported: 1)"),
    ("not-a-mapping", "- fleet: t\n", 1, "", "expected a mapping of sections at the top, got a list"),
    (
        "engine-null",
        edit("      - name: e1\n", "      - ~\n      - name: e1\n"),
        9,
        "hosts[0].engines[0]",
        "expected a mapping, got nothing (null)",
    ),
    (
        "base-model-unknown",
        edit("        base_model: m1", "        base_model: m2"),
        12,
        "hosts[0].engines[0].base_model",
        "'m2' is not a base model in this inventory (known: m1)",
    ),
    (
        "no-base-models",
        BASE.replace("  m1: {", "  # m1: {"),
        12,
        "hosts[0].engines[0].base_model",
        "'m1' is not a base model in this inventory (known: none defined)",
    ),
    ("yaml-syntax", edit("  t1: {pinned: [a1]}", "  t1: {pinned: [a1}"), 20, "", "invalid YAML"),
    ("top-level-typo", edit("tenants:", "tenant:"), 19, "tenant", "did you mean 'tenants'"),
    (
        "ssh-port",
        edit("    gpus: 2", "    gpus: 2\n    ssh: {port: 70000}"),
        8,
        "hosts[0].ssh.port",
        "must be at most 65535",
    ),
    (
        "ssh-password",
        edit("    gpus: 2", "    gpus: 2\n    ssh: {password: hunter2}"),
        8,
        "hosts[0].ssh.password",
        "password_env",
    ),
    ("nginx-field", BASE + NGINX, 26, "gateway.logs[0].fields.adapter", "$http_x_adapter is not in log_format"),
    (
        "url-unclosed-bracket",
        edit("url: http://127.0.0.1:8000", 'url: "http://[127.0.0.1:8000"'),
        11,
        "hosts[0].engines[0].url",
        "not a valid URL (Invalid IPv6 URL)",
    ),
    ("proxy-unclosed-bracket", "defaults:\n  proxy: 'http://[::1'\n" + BASE, 2, "defaults.proxy", "not a valid URL"),
    (
        "rank-past-any-count",
        edit("    rank: 8", "    rank: 1" + "0" * 400),
        18,
        "adapters[0].rank",
        "at most 2147483647, got a number of 401 digits",
    ),
    (
        "kubeconfig-of-no-user",
        BASE + "discovery:\n  kubeconfig: '~no-such-user-here/kc'\n  groups: []\n",
        22,
        "discovery.kubeconfig",
        "no such user's home folder here",
    ),
    ("control-character", edit("    gpus: 2", "    gpus: 2\x01"), 7, "", "character 0x0001"),
    ("integer-past-python's-limit", edit("    gpus: 2", "    gpus: " + "9" * 4301), 7, "hosts[0].gpus", "4300 digits"),
    (
        "alias-to-itself",
        edit("tenants:\n  t1: {pinned: [a1]}", "tenants:\n  t1: &t {pinned: [a1], x: *t}"),
        20,
        "tenants.t1.x",
        "refers to itself",
    ),
    (
        "kv-heads",
        edit("num_kv_heads: 8}", "num_kv_heads: 5}"),
        3,
        "base_models.m1.num_kv_heads",
        "must be a multiple of num_kv_heads (5)",
    ),
]


@pytest.mark.parametrize(("text", "line", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_inventory_names_line_and_field(
    text: str, line: int, path: str, words: str, write_yaml, run_cli
) -> None:
    inv = write_yaml(text)
    with pytest.raises(InventoryError) as caught:
        load_inventory(inv)
    prefix = f"{inv}:{line}: {path + ': ' if path else ''}"
    messages = [str(p) for p in caught.value.problems]
    assert any(m.startswith(prefix) and words in m for m in messages), messages

    result = run_cli("inventory", "check", "-i", str(inv))
    assert result.exit_code == 2
    assert "Traceback" not in result.output + result.stderr
    assert f"error: {prefix}" in result.stderr
    assert result.stdout == ""


def test_three_mistakes_reported_together_in_one_run(write_yaml, run_cli) -> None:
    text = edit("        max_loras: 2", "        max_lora: 2\n        max_loras: 2\n        max_loras: 3")
    text = text.replace("        base_model: m1", "        base_model: llama3-70b", 1)
    result = run_cli("inventory", "check", "-i", str(write_yaml(text)))
    assert result.exit_code == 2
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert any(":12: hosts[0].engines[0].base_model: 'llama3-70b' is not a base model" in e for e in errors)
    assert any(":13: hosts[0].engines[0].max_lora: unknown key; did you mean 'max_loras'?" in e for e in errors)
    assert any(":15: hosts[0].engines[0].max_loras: duplicate key (first defined on line 14)" in e for e in errors)


def test_error_count_is_capped_but_says_how_many_more(write_yaml) -> None:
    hosts = "".join(f"  - {{name: h{i}, provider: nope}}\n" for i in range(80))
    with pytest.raises(InventoryError) as caught:
        load_inventory(write_yaml(f"hosts:\n{hosts}"))
    lines = caught.value.lines()
    assert len(caught.value.problems) == 80
    assert len(lines) == 51 and lines[-1] == "… and 30 more problems not shown"


def test_group_engine_mistake_is_reported_once_not_per_host(write_yaml) -> None:
    text = BASE.replace(
        "hosts:\n",
        "groups:\n  g:\n    provider: onprem\n    hosts: {'n[1:8]': {}}\n"
        "    engines:\n      - {name: e, kind: vllm, url: 'http://{host}:1', base_model: nope}\nhosts:\n",
        1,
    )
    with pytest.raises(InventoryError) as caught:
        load_inventory(write_yaml(text))
    assert [p.path for p in caught.value.problems] == ["groups.g.engines[0].base_model"]


def test_folder_conflicts_name_both_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "base_models:\n  m1: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
    )
    (tmp_path / "b.yaml").write_text(
        "fleet: x\nbase_models:\n  m1: {hidden_size: 128, intermediate_size: 128, "
        "num_layers: 2, num_attention_heads: 4}\n"
    )
    with pytest.raises(InventoryError) as caught:
        load_inventory(tmp_path)
    (problem,) = caught.value.problems
    assert problem.file.endswith("b.yaml") and problem.line == 3
    assert "conflicts with the one defined at" in problem.message and "a.yaml:2" in problem.message


def test_measured_size_errors_are_located(write_yaml, tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "adapter_config.json").write_text('{"r": 8, "target_modules": ["q_proj"]}')
    (tmp_path / "broken" / "adapter_model.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    inv = write_yaml(edit("    rank: 8", "    rank: 8\n    files: broken"))
    with pytest.raises(InventoryError) as caught:
        load_inventory(inv)
    (problem,) = caught.value.problems
    assert problem.line == 19 and problem.path == "adapters[0].files"
    assert "safetensors header is not valid JSON" in problem.message


def test_a_host_without_provider_still_has_its_engines_checked(tmp_path: Path) -> None:
    text = BASE.replace("    provider: aws\n", "", 1).replace("        base_model: m1", "        base_model: m2")
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    messages = [str(p) for p in info.value.problems]
    assert any("host has no provider" in m for m in messages), messages
    assert any("'m2' is not a base model" in m for m in messages), messages


def test_aliases_that_copy_past_any_inventory_are_refused_at_once(write_yaml, run_cli) -> None:
    """A "billion laughs" file (ten aliases of ten, eight deep: 10^8 values from 400 bytes) is refused after a
    million copies, before it takes the machine's memory."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 8)]
    inv = write_yaml("\n".join(levels) + "\n")
    result = run_cli("inventory", "check", "-i", str(inv))
    assert result.exit_code == 2
    assert result.stderr == f"error: {inv}: its aliases copy more than 1,000,000 values: not an inventory\n"


# a section added to BASE: its head, its keys (one flow mapping), the path and line a missing key is reported at
SECTIONS = {
    "group": ("groups:\n  g: ", ["provider: aws", "hosts: {h2: {}}"], "groups.g", 22),
    "log": (
        "gateway:\n  logs:\n    - ",
        ["path: /l.jsonl", "format: jsonl", "fields: {adapter: model}"],
        "gateway.logs[0]",
        23,
    ),
    "discovery": ("discovery: ", ["context: c", "groups: []"], "discovery", 21),
    "discovery-group": (
        "discovery:\n  groups:\n    - ",
        ["name: g", "selector: {app: vllm}", "port: 8000", "kind: vllm", "base_model: m1"],
        "discovery.groups[0]",
        23,
    ),
}


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("group", "hosts"),
        *(("log", k) for k in ("path", "format", "fields")),
        ("discovery", "groups"),
        *(("discovery-group", k) for k in ("name", "selector", "port", "kind", "base_model")),
    ],
)
def test_a_section_without_a_key_it_needs_names_the_key_and_where(write_yaml, section: str, key: str) -> None:
    head, keys, path, line = SECTIONS[section]
    load_inventory(write_yaml(BASE + head + "{" + ", ".join(keys) + "}\n"))  # whole, it loads
    without = [k for k in keys if not k.startswith(f"{key}:")]
    assert len(without) == len(keys) - 1
    with pytest.raises(InventoryError) as caught:
        load_inventory(write_yaml(BASE + head + "{" + ", ".join(without) + "}\n"))
    assert [(p.line, p.path, p.message) for p in caught.value.problems] == [
        (line, path, f"missing required key '{key}'")
    ]


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("VLLM_API_KEY", False),
        ("A" * 23, False),
        ("A" * 24, True),  # a name this long is more likely a pasted key
        ("abcdefghijklmn1", False),
        ("abcdefghijklmno1", True),  # 16 characters mixing lower case and digits: a key's look
        ("abcdefghijklmnop", False),
        ("ABCDEFGHIJKLMNO1", False),
    ],
)
def test_an_api_key_env_that_looks_like_the_key_itself_is_refused_without_echoing_it(
    write_yaml, name: str, refused: bool
) -> None:
    text = edit("        max_loras: 2", f"        max_loras: 2\n        api_key_env: {name}")
    if not refused:
        assert load_inventory(write_yaml(text)).engines[0].api_key_env == name
        return
    with pytest.raises(InventoryError) as caught:
        load_inventory(write_yaml(text))
    (problem,) = caught.value.problems
    assert "not an environment variable name" in problem.message and name not in problem.message


@pytest.mark.parametrize("selector", ["{}", "[app]", "''"])
def test_a_discovery_selector_that_selects_nothing_in_particular_is_refused(write_yaml, selector: str) -> None:
    """An empty selector would match every endpoint slice of the namespace: every pod would be an engine."""
    group = f"{{name: g, selector: {selector}, port: 8000, kind: vllm, base_model: m1}}"
    with pytest.raises(InventoryError) as caught:
        load_inventory(write_yaml(BASE + f"discovery:\n  groups:\n    - {group}\n"))
    assert [(p.line, p.path) for p in caught.value.problems] == [(23, "discovery.groups[0].selector")]
    assert caught.value.problems[0].message.startswith("expected a mapping of labels or a selector string, got ")


@pytest.mark.parametrize("fast", [True, False], ids=["libyaml", "pure-python"])
@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("fleet: t\nhosts:\n  - name: h\x01\n", 3, "invalid YAML: character 0x0001"),
        ("fleet: t\n# " + "é" * 100 + "\nhosts: []\n\n\n\nx: a\x01\n", 7, "invalid YAML: character 0x0001"),
        ("fleet: t\n? [a, b]\n: 1\n", 2, "mapping keys must be plain names"),
        ("fleet: t\n~: 1\n", 2, "mapping keys must be plain names"),
        ("fleet: t\n\nfleet: u\n", 3, "duplicate key (first defined on line 1)"),
    ],
)
def test_either_yaml_reader_locates_what_it_cannot_take(
    write_yaml, monkeypatch, fast: bool, text: str, line: int, words: str
) -> None:
    """libyaml and PyYAML's own reader (where libyaml is not installed) count positions differently."""
    if not fast:
        monkeypatch.setattr(yamlsource, "C_LOADER", None)
    elif yamlsource.C_LOADER is None:
        pytest.skip("PyYAML built without libyaml here")
    _, problems = yamlsource.load_yaml(write_yaml(text))
    assert [(p.line, words in p.message) for p in problems] == [(line, True)], problems


def test_a_file_of_plain_text_given_as_the_inventory_or_a_plan_is_refused_without_echoing_it(
    write_yaml, run_cli
) -> None:
    """`-i .env` by mistake: the file parses as one YAML string, and none of it reaches the terminal."""
    secret = "OPENAI_API_KEY=sk-proj-0123456789abcdef\nDB_PASSWORD=hunter2\n"
    path = write_yaml(secret, "dot.env")
    result = run_cli("inventory", "check", "-i", str(path))
    assert result.exit_code == 2
    assert "expected a mapping of sections at the top, got plain text of 59 characters (not shown)" in result.stderr
    assert "sk-proj" not in result.stderr + result.stdout and "hunter2" not in result.stderr + result.stdout
    inventory = write_yaml(BASE, "inv.yaml")
    planned = run_cli("plan", "-i", str(inventory), "--log", str(path), "--diff", str(path))
    assert planned.exit_code != 0 and "sk-proj" not in planned.stderr + planned.stdout


def test_a_long_value_is_shown_cut_with_its_length_and_the_error_stays_one_readable_line(write_yaml) -> None:
    text = edit("    provider: aws", "    provider: " + "x" * 3000)
    with pytest.raises(InventoryError) as caught:
        load_inventory(write_yaml(text))
    (problem,) = caught.value.problems
    assert problem.message.startswith("unknown provider '" + "x" * 60 + "'… (3,000 characters) (known: aws, ")
    assert len(problem.message) < 300
    short = edit("    provider: aws", "    provider: " + "x" * 60)
    with pytest.raises(InventoryError) as whole:
        load_inventory(write_yaml(short))
    assert whole.value.problems[0].message.startswith("unknown provider '" + "x" * 60 + "' (known: ")
    from lorafleet.inventory.fields import quoted

    assert quoted(list(range(40))) == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1… (150 characters)"
