"""Whatever an inventory holds, loading it gives an Inventory or a located InventoryError, never a crash."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lorafleet.errors import InputError
from lorafleet.inventory import load_inventory
from tests.conftest import INVENTORIES

REFERENCE = yaml.safe_load((INVENTORIES / "reference.yaml").read_text())
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.just("{host}"),
    st.just("http://x:99999"),
    st.just("dgx-[3:1]"),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


ALL_PATHS = [p for p in paths(REFERENCE) if p]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(ALL_PATHS), VALUES, st.booleans()), min_size=1, max_size=4))
def test_mutated_reference_never_crashes(tmp_path: Path, edits: list[tuple[tuple[Any, ...], Any, bool]]) -> None:
    doc = copy.deepcopy(REFERENCE)
    for path, value, delete in edits:
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if delete and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    target = tmp_path / "fuzz.yaml"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        load_inventory(target)
    except InputError as exc:
        assert all(line for line in exc.lines())
