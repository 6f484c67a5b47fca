"""Adapter sizing against hand-computed numbers and against real safetensors files."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.errors import InventoryError
from lorafleet.inventory import load_inventory
from lorafleet.inventory.model import BaseModel
from lorafleet.inventory.sizing import (
    KNOWN_MODULES,
    SizingError,
    estimate_bytes,
    measure_adapter,
    read_safetensors_bytes,
)
from tests.peft_files import write_peft_adapter

LLAMA3_8B = BaseModel("llama3-8b", "meta-llama/Meta-Llama-3-8B-Instruct", 4096, 14336, 32, 32, 8, 128, "bfloat16")
QWEN25_7B = BaseModel("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", 3584, 18944, 28, 28, 4, 128, "bfloat16")


def test_llama3_8b_rank128_all_modules_bf16() -> None:
    # per layer: q,o 128·(4096+4096); k,v 128·(4096+1024); gate,up,down 128·(4096+14336); ×32 layers ×2 bytes
    assert estimate_bytes(LLAMA3_8B, 128, KNOWN_MODULES) == 671_088_640
    assert estimate_bytes(LLAMA3_8B, 128, ("all-linear",)) == 671_088_640


def test_qv_only_and_gqa_shapes() -> None:
    # llama3-8b r16 q,v: 16·(4096+4096) + 16·(4096+1024) = 212,992 params/layer ×32 ×2
    assert estimate_bytes(LLAMA3_8B, 16, ("q_proj", "v_proj")) == 13_631_488
    # qwen2.5-7b r64 q,k,v,o: kv = 4·128 = 512 → 64·(7168 + 4096·2 ... computed by hand below)
    per_layer = 64 * ((3584 + 3584) * 2 + (3584 + 512) * 2)
    assert estimate_bytes(QWEN25_7B, 64, ("q_proj", "k_proj", "v_proj", "o_proj")) == per_layer * 28 * 2


def test_head_dim_override_changes_q_and_o() -> None:
    base = BaseModel("g", "g", 2048, 8192, 2, 8, 1, 256, "float32")  # 8 heads × 256 = 2048? no: q out = 2048
    wide = BaseModel("g", "g", 2048, 8192, 2, 16, 1, 256, "float32")  # q out = 4096 ≠ hidden
    assert estimate_bytes(base, 4, ("q_proj",)) == 4 * (2048 + 2048) * 2 * 4
    assert estimate_bytes(wide, 4, ("q_proj", "o_proj")) == 4 * ((2048 + 4096) * 2) * 2 * 4


def test_unknown_module_lists_known_ones() -> None:
    with pytest.raises(SizingError, match=r"unknown target module 'lm_head'.*q_proj, k_proj"):
        estimate_bytes(LLAMA3_8B, 8, ("lm_head",))


def test_measured_matches_tensor_bytes_written(tmp_path: Path) -> None:
    modules = {"q_proj": (256, 256), "v_proj": (256, 64)}
    written = write_peft_adapter(tmp_path / "a", rank=8, modules=modules, layers=2, dtype="F32")
    assert written == 2 * (8 * (256 + 256) + 8 * (256 + 64)) * 4
    measured = measure_adapter(tmp_path / "a")
    assert measured.size_bytes == written
    assert measured.rank == 8
    assert measured.target_modules == ("q_proj", "v_proj")


def test_measured_equals_estimate_for_real_shapes(tmp_path: Path) -> None:
    from lorafleet.inventory.sizing import module_shape

    modules = {m: module_shape(LLAMA3_8B, m) for m in KNOWN_MODULES}
    write_peft_adapter(tmp_path / "full", rank=128, modules=modules, layers=32, dtype="BF16")
    assert read_safetensors_bytes(tmp_path / "full" / "adapter_model.safetensors") == 671_088_640


def _header(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(8, "little") + raw


_Q4 = b'{"w": {"dtype": "Q4", "shape": []}}'
_NEG = b'{"w": {"dtype": "F32", "shape": [-1, 2]}}'


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\x01\x02", "shorter than its header length"),
        (b"\xff" * 8, "implausible"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{}", "truncated"),
        (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "not a JSON object"),
        (len(_Q4).to_bytes(8, "little") + _Q4, "unknown dtype 'Q4'"),
        (len(_NEG).to_bytes(8, "little") + _NEG, "malformed shape"),
        (_header('{"w": {"dtype": ["BF16"], "shape": [2]}}'), "unknown dtype"),
        (_header('{"w": {"dtype": "F32"}}'), "has no dtype or shape"),
        (_header('{"w": {"shape": [2]}}'), "has no dtype or shape"),
        (_header('{"w": [2]}'), "has no dtype or shape"),
        (_header('{"w": {"dtype": "F32", "shape": [true, 2]}}'), "malformed shape"),
        (_header('{"w": {"dtype": "F32", "shape": [1e300]}}'), "malformed shape"),
        (_header('{"w": {"dtype": "F32", "shape": [4294967296, 4294967296]}}'), "more than a pebibyte"),
        (_header('{"w": {"dtype": "F32", "shape": [' + "9" * 5000 + "]}}"), "4300-digit limit"),
        (_header("[" * 100_000 + "]" * 100_000), "nested too deeply"),
    ],
)
def test_bad_safetensors_headers(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(content)
    with pytest.raises(SizingError, match=words):
        read_safetensors_bytes(path)


def test_inventory_reads_files_relative_to_itself(tmp_path: Path, write_yaml) -> None:
    written = write_peft_adapter(tmp_path / "adapters" / "sql", rank=16, modules={"q_proj": (64, 64)}, layers=2)
    inv = load_inventory(
        write_yaml(
            "base_models:\n  tiny: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
            "adapters:\n"
            "  - {id: sql, base_model: tiny, path: /engine/sql, files: adapters/sql}\n"
            "  - {id: est, base_model: tiny, path: /engine/est, rank: 16, target_modules: [q_proj]}\n"
        )
    )
    sql, est = inv.adapters["sql"], inv.adapters["est"]
    assert (sql.size_source, sql.size_bytes, sql.rank, sql.target_modules) == ("measured", written, 16, ("q_proj",))
    assert (est.size_source, est.size_bytes) == ("estimated", written)


def test_rank_disagreeing_with_adapter_config_is_an_error(tmp_path: Path, write_yaml) -> None:
    from lorafleet.errors import InventoryError

    write_peft_adapter(tmp_path / "a", rank=16, modules={"q_proj": (64, 64)}, layers=1)
    text = (
        "base_models:\n  tiny: {hidden_size: 64, intermediate_size: 128, num_layers: 1, num_attention_heads: 4}\n"
        "adapters:\n  - {id: a, base_model: tiny, path: /x, files: a, rank: 32}\n"
    )
    with pytest.raises(InventoryError, match="problem") as caught:
        load_inventory(write_yaml(text))
    assert "rank 32 disagrees with r=16" in caught.value.problems[0].message


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ('{"r": 8, "target_modules": 5}', "target_modules must be a name or a list of names"),
        ('{"r": 8, "target_modules": {"q_proj": 1}}', "target_modules must be a name or a list of names"),
        ('{"r": ' + "9" * 5000 + "}", "4300-digit limit"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_bad_adapter_configs(tmp_path: Path, config: str, words: str) -> None:
    write_peft_adapter(tmp_path / "a", rank=8, modules={"q_proj": (64, 64)}, layers=1, dtype="F32")
    (tmp_path / "a" / "adapter_config.json").write_text(config)
    with pytest.raises(SizingError, match=words):
        measure_adapter(tmp_path / "a")


def test_a_rank_of_true_is_no_rank(tmp_path: Path) -> None:
    write_peft_adapter(tmp_path / "a", rank=8, modules={"q_proj": (64, 64)}, layers=1, dtype="F32")
    (tmp_path / "a" / "adapter_config.json").write_text('{"r": true, "target_modules": ["q_proj"]}')
    assert measure_adapter(tmp_path / "a").rank is None


# Bytes per element of every dtype the safetensors format defines (huggingface/safetensors, `Dtype`).
SPEC_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip


@pytest.mark.parametrize(("dtype", "size"), sorted(SPEC_BYTES.items()))
def test_each_dtype_counts_its_bytes_and_an_empty_dimension_none(tmp_path: Path, dtype: str, size: int) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(
        _header(
            f'{{"__metadata__": {{"format": "pt"}}, "w": {{"dtype": "{dtype}", "shape": [3, 5]}},'
            f' "e": {{"dtype": "{dtype}", "shape": [0, 7]}}}}'
        )
    )
    assert read_safetensors_bytes(path) == 15 * size


def test_the_adapters_own_weights_file_is_measured_else_the_first_safetensors(tmp_path: Path) -> None:
    """PEFT writes adapter_model.safetensors; a folder without it is measured by its first .safetensors."""
    write_peft_adapter(tmp_path / "a", rank=8, modules={"q_proj": (64, 64)}, layers=1, dtype="F32")
    (tmp_path / "a" / "0-other.safetensors").write_bytes(_header('{"w": {"dtype": "F32", "shape": [1]}}'))
    assert measure_adapter(tmp_path / "a").size_bytes == 8 * (64 + 64) * 4
    (tmp_path / "a" / "adapter_model.safetensors").unlink()
    measured = measure_adapter(tmp_path / "a")
    assert (measured.size_bytes, Path(measured.weights_file).name) == (4, "0-other.safetensors")
    (tmp_path / "a" / "0-other.safetensors").unlink()
    with pytest.raises(SizingError, match=r"no \.safetensors weights"):
        measure_adapter(tmp_path / "a")


def test_target_modules_written_in_the_inventory_win_over_adapter_config(tmp_path: Path, write_yaml) -> None:
    write_peft_adapter(tmp_path / "qv", rank=8, modules={"q_proj": (64, 64), "v_proj": (64, 16)}, layers=2)
    models = "base_models:\n  tiny: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
    inv = load_inventory(
        write_yaml(
            models + "adapters:\n"
            "  - {id: read, base_model: tiny, path: /e/qv, files: qv}\n"
            "  - {id: said, base_model: tiny, path: /e/qv, files: qv, target_modules: [q_proj]}\n"
        )
    )
    assert inv.adapters["read"].target_modules == ("q_proj", "v_proj")
    assert inv.adapters["said"].target_modules == ("q_proj",)
    assert inv.adapters["said"].size_bytes == inv.adapters["read"].size_bytes  # the bytes are measured either way


def test_a_head_size_that_does_not_divide_needs_head_dim(write_yaml) -> None:
    model = "base_models:\n  odd: {hidden_size: 100, intermediate_size: 128, num_layers: 2, num_attention_heads: 3%s}\n"
    with pytest.raises(InventoryError) as caught:
        load_inventory(write_yaml(model % ""))
    (problem,) = caught.value.problems
    assert (problem.path, problem.message) == (
        "base_models.odd.hidden_size",
        "hidden_size (100) is not divisible by num_attention_heads (3); give head_dim",
    )
    assert load_inventory(write_yaml(model % ", head_dim: 32")).base_models["odd"].head_dim == 32
