"""Contract tests of the vLLM and SGLang clients with pytest-httpx: every request is expected, none unexpected."""

from __future__ import annotations

import httpx
import pytest
from pytest_httpx import HTTPXMock

from lorafleet.engines import (
    AlreadyLoadedError,
    EngineRejectedError,
    EngineUnavailableError,
    MissingApiKeyError,
    NotRegisteredError,
    make_client,
)
from lorafleet.engines.vllm import parse_lora_requests_info
from tests.engines.conftest import make_engine

URL = "http://engine.test:8000"
NO_WAIT: list[float] = []


def client(kind: str = "vllm", **kwargs):  # type: ignore[no-untyped-def]
    return make_client(make_engine(kind, URL, **kwargs), sleep=NO_WAIT.append)


def test_vllm_load_plain_text_success(httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(
        method="POST",
        url=f"{URL}/v1/load_lora_adapter",
        text="Success: LoRA adapter 'a' added successfully.",
        match_json={"lora_name": "a", "lora_path": "/p/a"},
    )
    client().load("a", "/p/a")


@pytest.mark.parametrize(
    "body",
    [
        {
            "error": {
                "message": "The lora adapter 'a' has already been loaded. If you want to load the adapter in "
                "place, set 'load_inplace' to True.",
                "type": "InvalidUserInput",
                "code": 400,
            }
        },
        {
            "object": "error",
            "message": "The lora adapter 'a' has already been loaded.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ],
    ids=["current", "old-flat"],
)
def test_vllm_already_loaded_in_both_error_shapes(httpx_mock: HTTPXMock, body: dict) -> None:
    httpx_mock.add_response(method="POST", url=f"{URL}/v1/load_lora_adapter", status_code=400, json=body)
    with pytest.raises(AlreadyLoadedError, match="has already been loaded"):
        client().load("a", "/p/a")


def test_4xx_is_not_retried_and_carries_the_engines_message(httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(
        method="POST", status_code=404, json={"error": {"message": "Loading lora a failed: No adapter found for /nope"}}
    )
    with pytest.raises(EngineRejectedError) as caught:
        client().load("a", "/nope")
    assert caught.value.status == 404 and "No adapter found for /nope" in caught.value.message
    assert len(httpx_mock.get_requests()) == 1


def test_5xx_and_connect_errors_are_retried_on_the_backoff_list(httpx_mock: HTTPXMock) -> None:
    waits: list[float] = []
    c = make_client(make_engine("vllm", URL), sleep=waits.append)
    httpx_mock.add_exception(httpx.ConnectError("refused"), method="POST")
    httpx_mock.add_response(method="POST", status_code=503, headers={"Retry-After": "2"})
    httpx_mock.add_response(method="POST", text="Success: LoRA adapter 'a' added successfully.")
    c.load("a", "/p/a")
    assert waits == [0.2, 2.0]  # backoff, then the engine's Retry-After


def test_429_is_retried_as_the_engine_asks_and_other_4xx_are_not(httpx_mock: HTTPXMock) -> None:
    """Too many requests is the engine busy, not the request wrong: it is sent again after its Retry-After."""
    waits: list[float] = []
    c = make_client(make_engine("vllm", URL), sleep=waits.append)
    httpx_mock.add_response(method="POST", status_code=429, headers={"Retry-After": "1"})
    httpx_mock.add_response(method="POST", text="Success: LoRA adapter 'a' added successfully.")
    c.load("a", "/p/a")
    assert waits == [1.0] and len(httpx_mock.get_requests()) == 2
    httpx_mock.add_response(method="POST", status_code=430, json={"error": {"message": "no"}})
    with pytest.raises(EngineRejectedError):
        c.load("a", "/p/a")
    assert len(httpx_mock.get_requests()) == 3


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_load_whose_answer_timed_out_is_sent_again(httpx_mock: HTTPXMock, kind: str) -> None:
    """A load is safe to repeat (a repeated one answers "already loaded"): a lost answer is retried, unlike a
    1-token request, which would run twice."""
    path = "/v1/load_lora_adapter" if kind == "vllm" else "/load_lora_adapter"
    httpx_mock.add_exception(httpx.ReadTimeout("slow"), method="POST", url=f"{URL}{path}")
    httpx_mock.add_response(method="POST", url=f"{URL}{path}", json={"success": True})
    client(kind).load("a", "/p/a")
    assert len(httpx_mock.get_requests()) == 2


def test_an_answer_is_read_up_to_max_response_bytes_and_refused_past_it(httpx_mock: HTTPXMock) -> None:
    import dataclasses

    engine = dataclasses.replace(make_engine("vllm", URL), max_response_bytes=100)
    c = make_client(engine, sleep=NO_WAIT.append)
    httpx_mock.add_response(url=f"{URL}/v1/models", text='{"data": []}'.ljust(100))
    assert c.registry() == set()
    httpx_mock.add_response(url=f"{URL}/v1/models", text='{"data": []}'.ljust(101))
    with pytest.raises(EngineRejectedError, match="answered more than 100 bytes"):
        c.registry()


def test_one_line_cuts_at_its_limit_with_an_ellipsis() -> None:
    from lorafleet.engines.base import one_line

    assert one_line("a\n b\t\tc") == "a b c"
    assert one_line("x" * 10, limit=10) == "x" * 10
    assert one_line("x" * 11, limit=10) == "x" * 9 + "…"


def test_retries_are_bounded(httpx_mock: HTTPXMock) -> None:
    for _ in range(4):
        httpx_mock.add_response(method="POST", status_code=500, json={"error": {"message": "worker died"}})
    with pytest.raises(EngineUnavailableError, match="HTTP 500: worker died"):
        client().load("a", "/p/a")
    assert len(httpx_mock.get_requests()) == 4


def test_timeout_becomes_unavailable(httpx_mock: HTTPXMock) -> None:
    for _ in range(4):
        httpx_mock.add_exception(httpx.ReadTimeout("slow"))
    with pytest.raises(EngineUnavailableError, match="timed out after 5s"):
        client().registry()


def test_rewarm_is_a_1_token_request_never_a_load_in_place(httpx_mock: HTTPXMock) -> None:
    """vLLM keeps `load_inplace` on the adapter's stored request and re-reads it from disk on every later request:
    a re-warm is the completion alone (pytest-httpx fails the test on any other request)."""
    httpx_mock.add_response(
        method="POST",
        url=f"{URL}/v1/completions",
        match_json={"model": "a", "prompt": "ping", "max_tokens": 1, "temperature": 0},
        json={"choices": [{"text": "x"}]},
    )
    client().rewarm("a", "/p/a")


def test_registry_is_cards_with_a_parent(httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(
        url=f"{URL}/v1/models",
        is_reusable=True,
        json={
            "data": [
                {"id": "base", "parent": None},
                {"id": "a", "root": "/p/a", "parent": "base"},
                {"id": "b", "parent": "base"},
            ]
        },
    )
    c = client()
    assert c.registry() == {"a", "b"}
    assert c.served_model() == "base"


def test_bearer_key_from_the_environment_and_never_in_repr(httpx_mock: HTTPXMock, monkeypatch) -> None:
    monkeypatch.setenv("TEST_VLLM_KEY", "sk-test-secret")
    httpx_mock.add_response(
        url=f"{URL}/v1/models", match_headers={"Authorization": "Bearer sk-test-secret"}, json={"data": []}
    )
    c = client(api_key_env="TEST_VLLM_KEY")
    assert c.registry() == set()
    assert "sk-test-secret" not in repr(c)


def test_an_engine_echoing_the_key_or_terminal_escapes_in_an_error_leaves_neither_in_the_message(
    httpx_mock: HTTPXMock, monkeypatch
) -> None:
    """The message goes to the journal and `stats loads`: the key is masked, escape sequences dropped."""
    monkeypatch.setenv("TEST_VLLM_KEY", "sk-test-secret")
    body = {"error": {"message": "denied for Authorization: Bearer sk-test-secret \x1b[2J\x07"}}
    httpx_mock.add_response(method="POST", url=f"{URL}/v1/load_lora_adapter", status_code=401, json=body)
    with pytest.raises(EngineRejectedError) as caught:
        client(api_key_env="TEST_VLLM_KEY").load("a", "/p/a")
    assert caught.value.message.endswith("HTTP 401: denied for Authorization: Bearer *** [2J")


def test_a_key_variable_ending_in_a_newline_is_the_key_and_one_with_whitespace_inside_is_refused_unechoed(
    httpx_mock: HTTPXMock, monkeypatch
) -> None:
    """A secret made from a file (`kubectl create secret --from-file`) ends in a newline: the HTTP library would
    refuse the header with an error quoting the key, which went to the table and the journal."""
    monkeypatch.setenv("TEST_VLLM_KEY", "sk-test-secret\n")
    httpx_mock.add_response(
        url=f"{URL}/v1/models", match_headers={"Authorization": "Bearer sk-test-secret"}, json={"data": []}
    )
    assert client(api_key_env="TEST_VLLM_KEY").registry() == set()
    monkeypatch.setenv("TEST_VLLM_KEY", "sk-test\tsecret")
    with pytest.raises(MissingApiKeyError) as caught:
        client(api_key_env="TEST_VLLM_KEY")
    assert "TEST_VLLM_KEY" in str(caught.value) and "sk-test" not in str(caught.value)


def test_a_key_echoed_past_the_messages_length_is_masked_before_the_message_is_cut(
    httpx_mock: HTTPXMock, monkeypatch
) -> None:
    key = "sk-proj-" + "A1b2C3d4" * 8
    monkeypatch.setenv("TEST_VLLM_KEY", key)
    body = {"error": {"message": "x" * 250 + f" Authorization: Bearer {key}"}}  # cut 300 characters in
    httpx_mock.add_response(method="POST", url=f"{URL}/v1/load_lora_adapter", status_code=401, json=body)
    with pytest.raises(EngineRejectedError) as caught:
        client(api_key_env="TEST_VLLM_KEY").load("a", "/p/a")
    assert "A1b2C3d4" not in caught.value.message and "Bearer ***" in caught.value.message


def test_an_sglang_failure_body_echoing_the_key_is_masked_and_one_line(httpx_mock: HTTPXMock, monkeypatch) -> None:
    monkeypatch.setenv("TEST_SGLANG_KEY", "sk-test-secret")
    body = {"success": False, "error_message": "bad token sk-test-secret\x1b[2J"}
    httpx_mock.add_response(method="POST", url=f"{URL}/load_lora_adapter", json=body)
    with pytest.raises(EngineRejectedError) as caught:
        client("sglang", api_key_env="TEST_SGLANG_KEY").load("a", "/p/a")
    assert caught.value.message.endswith(": bad token ***[2J") and "\x1b" not in caught.value.message


@pytest.mark.parametrize("kind, path", [("vllm", "/v1/load_lora_adapter"), ("sglang", "/load_lora_adapter")])
def test_a_redirect_is_a_refusal_never_a_load(httpx_mock: HTTPXMock, kind: str, path: str) -> None:
    """A 3xx did nothing on this engine (and is not followed: the key would travel with it)."""
    httpx_mock.add_response(
        method="POST", url=f"{URL}{path}", status_code=307, headers={"Location": "http://127.0.0.2:9/x"}
    )
    with pytest.raises(EngineRejectedError) as caught:
        client(kind).load("a", "/p/a")
    assert caught.value.message.endswith(
        f"HTTP 307: POST {path} answered a redirect to http://127.0.0.2:9/x, not followed"
    )


def test_missing_key_variable_is_named(monkeypatch) -> None:
    monkeypatch.delenv("NOT_SET_KEY", raising=False)
    with pytest.raises(MissingApiKeyError, match="NOT_SET_KEY"):
        client(api_key_env="NOT_SET_KEY")


def test_vllm_metrics_take_the_newest_series() -> None:
    text = (
        "# TYPE vllm:lora_requests_info gauge\n"
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.7e+09\n'
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 1.8e+09\n'
    )
    activity = parse_lora_requests_info(text)
    assert (activity.running, activity.waiting, activity.max_lora) == (("a", "b"), ("c",), 2)
    assert parse_lora_requests_info("").running == ()


def test_sglang_load_json_success_and_pinned_flag(httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(
        method="POST",
        url=f"{URL}/load_lora_adapter",
        match_json={"lora_name": "a", "lora_path": "/p/a", "pinned": True},
        json={"success": True, "error_message": None, "loaded_adapters": {"a": "/p/a"}},
    )
    client("sglang").load("a", "/p/a", pinned=True)


@pytest.mark.parametrize(
    ("status", "message", "error"),
    [
        (400, "LoRA with name a already exists. Loaded LoRA adapters: {...}", AlreadyLoadedError),
        (
            400,
            "LoRA adapter a with rank 128 is incompatible with the current LoRA memory pool configuration.",
            EngineRejectedError,
        ),
        (200, "LoRA is not enabled", EngineRejectedError),  # success false even with 200
    ],
)
def test_sglang_failures(httpx_mock: HTTPXMock, status: int, message: str, error: type) -> None:
    httpx_mock.add_response(
        method="POST", status_code=status, json={"success": False, "error_message": message, "loaded_adapters": {}}
    )
    with pytest.raises(error) as caught:
        client("sglang").load("a", "/p/a")
    assert type(caught.value) is error and message.split(".")[0] in caught.value.message


def test_sglang_prime_names_base_and_adapter(httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(url=f"{URL}/v1/models", json={"data": [{"id": "qwen", "parent": None}]})
    httpx_mock.add_response(
        method="POST",
        url=f"{URL}/v1/completions",
        match_json={"model": "qwen:a", "prompt": "ping", "max_tokens": 1, "temperature": 0},
        json={"choices": []},
    )
    client("sglang").prime("a")


@pytest.mark.parametrize(
    ("kind", "route", "status", "message", "error"),
    [
        ("vllm", "/v1/unload_lora_adapter", 404, "The lora adapter 'a' cannot be found.", NotRegisteredError),
        ("vllm", "/v1/completions", 404, "The model `a` does not exist.", NotRegisteredError),
        ("vllm", "/v1/unload_lora_adapter", 404, "Not Found", EngineRejectedError),  # no such route: a failure
        ("vllm", "/v1/completions", 400, "The model `a` does not exist.", EngineRejectedError),  # not vLLM's 404
        ("sglang", "/unload_lora_adapter", 400, "LoRA with name a does not exist. Loaded LoRA adapters: {}", None),
        ("sglang", "/v1/completions", 400, "LoRA adapter a is not loaded.", NotRegisteredError),
        ("sglang", "/unload_lora_adapter", 400, "LoRA is not enabled", EngineRejectedError),
    ],
)
def test_an_adapter_the_engine_does_not_hold_is_not_registered_not_a_failure(
    httpx_mock: HTTPXMock, kind: str, route: str, status: int, message: str, error: type | None
) -> None:
    """After a restart the engine answers unloads and touches of what lorafleet held with "no such adapter":
    the wanted state for an unload, a stale book for a touch — never the adapter's fault."""
    error = error or NotRegisteredError
    if kind == "sglang" and route == "/v1/completions":
        httpx_mock.add_response(url=f"{URL}/v1/models", json={"data": [{"id": "qwen", "parent": None}]})
    body = {"error": {"message": message}} if kind == "vllm" else {"success": False, "error_message": message}
    httpx_mock.add_response(method="POST", url=f"{URL}{route}", status_code=status, json=body)
    with pytest.raises(EngineRejectedError) as caught:
        c = client(kind)
        c.unload("a") if "unload" in route else c.prime("a")
    assert type(caught.value) is error


def test_sglang_launch_limits(httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(url=f"{URL}/get_server_info", json={"max_loras_per_batch": 8, "max_loaded_loras": 24})
    assert client("sglang").launch_limits() == (8, 24)


def test_vllm_metrics_that_are_not_prometheus_text_are_no_activity() -> None:
    assert parse_lora_requests_info("<html>oops</html>\n{{{").running == ()
    escaped = 'vllm:lora_requests_info{running_lora_adapters="a\\"b",waiting_lora_adapters=""} 1.0\n'
    assert parse_lora_requests_info(escaped).running == ('a"b',)


def test_vllm_metrics_are_read_for_the_lora_family_alone() -> None:
    """A thousand lines of other families are not parsed (15 ms per engine and reconcile): a line of another
    family that prometheus_client cannot parse no longer hides the adapters running."""
    other = "".join(f'vllm:other_bucket{{le="{i}"}} {i}\n' for i in range(1000))
    text = (
        other
        + "vllm:broken{engine=\n"
        + "# TYPE vllm:lora_requests_info gauge\n"
        + 'vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.8e+09\n'
    )
    assert parse_lora_requests_info(text).running == ("a", "b")


def test_the_engines_tls_trust_ignores_the_environment(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Proxies and CA variables alike: what a client trusts is certifi's bundle, not whatever SSL_CERT_FILE names
    in the daemon's environment."""
    from lorafleet.engines import base

    monkeypatch.setattr(base, "_TLS", [])
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent/ca.pem")  # trusted, it would fail to load
    monkeypatch.setenv("SSL_CERT_DIR", "/nonexistent")
    context = base.verifying_context()
    assert context.verify_mode.name == "CERT_REQUIRED" and context.get_ca_certs()
