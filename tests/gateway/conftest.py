"""Gateway fixtures: emulated engines (shared with the engine tests), stand-in hint receivers and a real nginx."""

from __future__ import annotations

from tests.daemon.conftest import daemon_process  # noqa: F401 - a fixture these tests use
from tests.engines.conftest import adapter_dirs, emulators  # noqa: F401 - fixtures used by these tests
from tests.nginx_gateway import hint_receivers, nginx_gateway  # noqa: F401 - fixtures used by these tests
