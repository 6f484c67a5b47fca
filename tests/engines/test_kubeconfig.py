"""Reading a kubeconfig for discovery, as kubectl would: the context (current or named), its cluster's server,
the user's token or token file, the namespace; what cannot be honoured (credential plugins, a server that is no
URL) is a one-line input error, and TLS is verified unless the file itself says to skip it."""

from __future__ import annotations

import logging
import re
import ssl
from pathlib import Path

import pytest
import yaml

from lorafleet.engines.kubernetes import from_kubeconfig
from lorafleet.errors import InputError


def kubeconfig(tmp_path: Path, user: dict | None = None, cluster: dict | None = None, **context: object) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "contexts": [
            "not a context",  # an entry of another shape is passed over
            {"name": "main", "context": {"cluster": "c", "user": "u", **context}},
            {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "staging"}},
        ],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "http://127.0.0.1:6443/"}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "tok-123"}}],
    }
    path = tmp_path / "kube" / "config"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_current_context_or_the_named_one_gives_server_token_and_namespace(tmp_path: Path) -> None:
    access = from_kubeconfig(kubeconfig(tmp_path, namespace="inference"))
    assert (access.server, access.namespace, access.bearer()) == ("http://127.0.0.1:6443", "inference", "tok-123")
    assert "tok-123" not in repr(access)
    assert from_kubeconfig(kubeconfig(tmp_path)).namespace == "default"  # a context without one: kubectl's default
    assert from_kubeconfig(kubeconfig(tmp_path), "other").namespace == "staging"
    (tmp_path / "kube" / "token").write_text("from-file\n")
    access = from_kubeconfig(kubeconfig(tmp_path, user={"tokenFile": "token"}))  # beside the kubeconfig
    assert (access.token_file, access.bearer()) == (tmp_path / "kube" / "token", "from-file")


@pytest.mark.parametrize(
    ("user", "cluster", "context_name", "words"),
    [
        ({"exec": {"command": "aws"}}, None, None, "user 'u' needs a credential plugin, not supported"),
        ({"auth-provider": {"name": "gcp"}}, None, None, "user 'u' needs a credential plugin, not supported"),
        (None, {"server": "127.0.0.1:6443"}, None, "cluster 'c' has no http(s) server"),
        (None, {"insecure-skip-tls-verify": True}, None, "cluster 'c' has no http(s) server"),
        (None, None, "nope", "has no context 'nope'"),
    ],
)
def test_what_cannot_be_honoured_is_one_line(tmp_path: Path, user, cluster, context_name, words: str) -> None:
    with pytest.raises(InputError, match=re.escape(words)):
        from_kubeconfig(kubeconfig(tmp_path, user=user, cluster=cluster), context_name)


def test_a_file_that_is_no_kubeconfig_is_named(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("a: [b\n")
    with pytest.raises(InputError, match=re.escape(f"discovery: kubeconfig {path} is not YAML: ")):
        from_kubeconfig(path)
    path.write_text("current-context: ''\n")
    with pytest.raises(InputError, match=re.escape("has no current-context; set discovery.context")):
        from_kubeconfig(path)


def test_tls_is_verified_unless_the_kubeconfig_says_to_skip_it_in_so_many_words(tmp_path: Path, caplog) -> None:
    https = {"server": "https://127.0.0.1:6443"}
    assert isinstance(from_kubeconfig(kubeconfig(tmp_path, cluster=https)).verify, ssl.SSLContext)  # the system CAs
    said_as_text = {**https, "insecure-skip-tls-verify": "true"}  # a string is not YAML's true: verified
    assert isinstance(from_kubeconfig(kubeconfig(tmp_path, cluster=said_as_text)).verify, ssl.SSLContext)
    with caplog.at_level(logging.WARNING, logger="lorafleet"):
        access = from_kubeconfig(kubeconfig(tmp_path, cluster={**https, "insecure-skip-tls-verify": True}))
    assert access.verify is False and "skips TLS verification of https://127.0.0.1:6443" in caplog.text
