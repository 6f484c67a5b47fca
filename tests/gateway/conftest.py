"""Gateway fixtures: emulated engines (shared with the engine tests)."""

from __future__ import annotations

from tests.engines.conftest import adapter_dirs, emulators  # noqa: F401 - fixtures used by these tests
