"""deploy/nginx-lorafleet.conf in a real nginx in front of emulated engines: the answer, the JSON log line, the
hint at the request's start, and a lorafleet that is dead, slow or stopped costing the gateway next to nothing."""

from __future__ import annotations

import http.client
import json
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.nginx_gateway import NGINX, RECIPE, HintReceiver, render_recipe, require_nginx

HEADERS = {"Content-Type": "application/json", "X-Tenant-Id": "acme", "X-Lora-Adapter": "base-model"}
BODY = {"model": "base-model", "prompt": "hello", "max_tokens": 8, "user": "alice"}
LOG_FIELDS = {"ts", "duration_s", "request_id", "tenant", "adapter", "upstream", "status"}


class Client:
    """One keep-alive connection, as an SDK client holds one: a request the gateway has not finished (its mirror
    still running) delays the next request on it."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=10)

    def request(
        self, path: str = "/v1/completions", body: dict[str, Any] | None = BODY, method: str = "POST", **headers: str
    ) -> tuple[int, bytes, float, float]:
        """(status, body, seconds it took, time.time() when it ended)."""
        started = time.perf_counter()
        raw = json.dumps(body) if body is not None else None
        self.conn.request(method, path, raw, {**HEADERS, **headers} if body is not None else headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, data, time.perf_counter() - started, time.time()

    def close(self) -> None:
        self.conn.close()


def latencies(url: str, count: int = 5) -> list[float]:
    client = Client(url)
    try:
        out = []
        for _ in range(count):
            status, _, took, _ = client.request()
            assert status == 200
            out.append(took)
        return out
    finally:
        client.close()


def test_a_request_gets_the_engines_answer_and_one_json_log_line(emulators, hint_receivers, nginx_gateway) -> None:
    engine = emulators(kind="vllm", gen_fixed_s=0.3)
    receiver = hint_receivers("up")
    gateway = nginx_gateway([engine.url], receiver.port)
    status, data, _, ended = Client(gateway.url).request()
    assert status == 200 and json.loads(data)["choices"][0]["text"] == " warm"
    (line,) = gateway.wait_for_records(1)
    assert set(line) >= LOG_FIELDS
    assert line["status"] == 200 and line["tenant"] == "acme" and line["adapter"] == "base-model"
    assert line["upstream"] == f"127.0.0.1:{engine.port}"
    assert re.fullmatch(r"[0-9a-f]{32}", line["request_id"])
    assert 0.3 <= line["duration_s"] < 0.5  # the engine's generation time, and little more
    assert abs(line["ts"] - ended) < 0.2  # the END of the request, epoch seconds
    assert isinstance(line["ts"], float) and isinstance(line["duration_s"], float)
    assert engine.state.requests[-1][2] == BODY


def test_the_hint_carries_model_tenant_and_request_id_and_arrives_at_the_start(
    emulators, hint_receivers, nginx_gateway
) -> None:
    engine = emulators(kind="vllm", gen_fixed_s=0.5)
    receiver = hint_receivers("up")
    gateway = nginx_gateway([engine.url], receiver.port)
    status, _, _, ended = Client(gateway.url).request(Authorization="Bearer tenant-secret")
    assert status == 200
    (hint,) = receiver.wait_for(1)
    (line,) = gateway.wait_for_records(1)
    assert hint.method == "POST" and hint.path == "/v1/completions"
    assert hint.body["model"] == "base-model" and hint.body["user"] == "alice"
    assert hint.headers["x-tenant-id"] == "acme"
    assert hint.headers["x-request-id"] == line["request_id"]
    assert hint.headers["content-type"] == "application/json"
    assert "authorization" not in hint.headers  # the tenant's key stays between it and the engine
    assert hint.wall < ended - 0.3  # while the engine was still generating
    assert "x-lorafleet-hint-time" not in hint.headers  # a hint is timed by its receipt: no header nobody reads


def test_chat_completions_are_hinted_and_other_paths_are_not(emulators, hint_receivers, nginx_gateway) -> None:
    engine = emulators(kind="vllm")
    receiver = hint_receivers("up")
    gateway = nginx_gateway([engine.url], receiver.port)
    client = Client(gateway.url)
    chat = {"model": "base-model", "messages": [{"role": "user", "content": "hi"}]}
    assert client.request("/v1/chat/completions", chat)[0] == 200
    assert client.request("/v1/models", None, "GET")[0] == 200
    assert client.request("/health", None, "GET")[0] == 200
    assert [h.path for h in receiver.wait_for(1)] == ["/v1/chat/completions"]
    assert len(gateway.wait_for_records(3)) == 3  # every request is logged, hinted or not
    time.sleep(0.1)
    assert len(receiver.received()) == 1


def test_tenants_cannot_administer_adapters_or_reach_the_hint_location(
    emulators, hint_receivers, nginx_gateway
) -> None:
    engine = emulators(kind="vllm")
    gateway = nginx_gateway([engine.url], hint_receivers("up").port)
    client = Client(gateway.url)
    load = {"lora_name": "x", "lora_path": "/tmp/x"}
    assert client.request("/v1/load_lora_adapter", load)[0] == 403
    assert client.request("/v1/unload_lora_adapter", {"lora_name": "x"})[0] == 403
    assert client.request("/_lorafleet_hint", BODY)[0] == 404
    for path in (
        "/v1/load_lora_adapter/",
        "/load_lora_adapter",
        "/flush_cache",
        "/update_weights_from_disk",
        "/sleep",
        "/reset_prefix_cache",
        "/metrics",
    ):  # the engines' administration: not the tenants'
        assert client.request(path, {})[0] == 403, path
    assert [p for _, p, _ in engine.state.requests] == []
    for path in ("/v1/models", "/health"):  # the allow list still reaches the engine
        assert client.request(path, None, "GET")[0] == 200, path
    assert client.request("/v1/responses", BODY)[0] == 404  # the emulator's answer: it got there, not a 403
    assert [p for _, p, _ in engine.state.requests] == ["/v1/models", "/health", "/v1/responses"]


def test_requests_spread_over_several_engines_and_the_log_names_each(emulators, hint_receivers, nginx_gateway) -> None:
    engines = [emulators(kind="vllm"), emulators(kind="vllm")]
    gateway = nginx_gateway([e.url for e in engines], hint_receivers("up").port)
    latencies(gateway.url, 4)
    upstreams = {line["upstream"] for line in gateway.wait_for_records(4)}
    assert upstreams == {f"127.0.0.1:{e.port}" for e in engines}


@pytest.mark.parametrize("mode", ["dead", "slow", "stopped"])
def test_a_dead_slow_or_stopped_lorafleet_costs_the_gateway_little(
    mode: str, emulators, hint_receivers, nginx_gateway
) -> None:
    """Behaviour, not speed: every request succeeds, on one keep-alive connection, with a bounded added delay
    (the hint location's timeouts), never the 5 s a slow receiver takes or the seconds a SYN retry would."""
    engine = emulators(kind="vllm")
    receiver = hint_receivers(mode, slow_s=5.0)
    gateway = nginx_gateway([engine.url], receiver.port)
    direct = latencies(engine.url)
    through = latencies(gateway.url)
    assert statistics.median(through) - statistics.median(direct) < 0.1
    assert max(through) < 0.5
    lines = gateway.wait_for_records(5)
    assert all(line["status"] == 200 and line["duration_s"] < 0.2 for line in lines)
    if mode == "slow":
        assert len(receiver.wait_for(5)) == 5  # delivered all the same: nginx stopped waiting for the answer
    else:
        assert receiver.received() == []


def test_a_slow_hint_does_not_delay_a_long_request(emulators, hint_receivers, nginx_gateway) -> None:
    """When the engine takes longer than the hint, the mirror costs nothing at all."""
    engine = emulators(kind="vllm", gen_fixed_s=0.2)
    gateway = nginx_gateway([engine.url], hint_receivers("stopped").port)
    took = latencies(gateway.url, 3)
    assert all(0.2 <= t < 0.35 for t in took)
    assert all(line["duration_s"] < 0.35 for line in gateway.wait_for_records(3))


def test_without_the_mirror_no_hint_is_sent(emulators, hint_receivers, nginx_gateway) -> None:
    engine = emulators(kind="vllm")
    receiver = hint_receivers("up")
    gateway = nginx_gateway([engine.url], receiver.port, mirror=False)
    latencies(gateway.url, 2)
    assert len(gateway.wait_for_records(2)) == 2
    time.sleep(0.1)
    assert receiver.received() == []


def test_the_recipe_filled_as_its_header_shows_passes_nginx_t(tmp_path: Path) -> None:
    """The header's sed example (its output path moved here) yields a config nginx accepts as written."""
    require_nginx()
    example = re.search(r"^#\s+(sed .*?)> /etc/nginx/conf\.d/lorafleet\.conf$", RECIPE.read_text(), re.S | re.M)
    assert example is not None
    command = re.sub(r"\\\n#\s+", "", example.group(1))
    command = command.replace("/var/log/nginx/llm-access.log", str(tmp_path / "access.jsonl"))
    site = subprocess.run(command, shell=True, cwd=RECIPE.parent.parent, capture_output=True, text=True, check=True)
    assert "<" not in re.sub(r"#[^\n]*", "", site.stdout)
    (tmp_path / "lorafleet.conf").write_text(site.stdout)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path / 'nginx.pid'};\nevents {{}}\n"
        f"http {{\n  access_log off;\n  include {tmp_path / 'lorafleet.conf'};\n}}\n"
    )
    checked = subprocess.run(
        [NGINX, "-t", "-p", f"{tmp_path}/", "-c", str(tmp_path / "nginx.conf"), "-e", str(tmp_path / "error.log")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_fixture_fills_only_loopback_addresses(tmp_path: Path) -> None:
    site = render_recipe(listen="127.0.0.1:1", engines=["http://127.0.0.1:2"], hints_port=3, access_log=tmp_path)
    assert "server 127.0.0.1:2;" in site and "127.0.0.1:3;" in site and "mirror /_lorafleet_hint;" in site
    for outside in ("http://10.0.0.11:8000", "localhost:8000", "[::1]:8000"):
        with pytest.raises(ValueError):
            render_recipe(listen="127.0.0.1:1", engines=[outside], hints_port=3, access_log=tmp_path)
    bare = render_recipe(listen="127.0.0.1:1", engines=["127.0.0.1:2"], hints_port=3, access_log=tmp_path, mirror=False)
    assert "mirror" not in re.sub(r"#[^\n]*", "", bare)


def test_the_stand_in_receivers_modes() -> None:
    """What the gateway tests lean on: "dead" refuses connections, "stopped" accepts into a backlog only."""
    import socket

    dead = HintReceiver("dead")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", dead.port), timeout=1).close()
    stopped = HintReceiver("stopped")
    try:
        with socket.create_connection(("127.0.0.1", stopped.port), timeout=1) as s:
            s.sendall(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            s.settimeout(0.2)
            with pytest.raises(TimeoutError):
                s.recv(1)
    finally:
        stopped.stop()


def test_the_gateway_closes_idle_connections_before_the_servers_behind_it_do() -> None:
    """uvicorn (vLLM, SGLang) closes an idle connection after 5 s, lorafleet's hint endpoint too: nginx must close
    its own first, or a request sent into a closing connection fails (502; a POST is never retried)."""
    text = RECIPE.read_text()
    for upstream in ("lorafleet_engines", "lorafleet_hints"):
        block = text[text.index(f"upstream {upstream} {{") :]
        block = block[: block.index("}")]
        found = re.search(r"keepalive_timeout (\d+)s;", block)
        assert found and int(found.group(1)) < 5, upstream
