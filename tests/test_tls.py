"""The process's one TLS context (harness/wire/tls.py): built once, and verifying exactly as
httpx's own default would (a shared context must never be a laxer one)."""

from __future__ import annotations

import ssl

import httpx

from harness.wire.tls import tls


def test_one_context_for_the_process():
    assert tls() is tls()


def test_it_verifies_as_httpx_does_by_default():
    ours, theirs = tls(), httpx.create_ssl_context()
    assert ours.verify_mode == theirs.verify_mode == ssl.CERT_REQUIRED
    assert ours.check_hostname is theirs.check_hostname is True
    assert ours.minimum_version == theirs.minimum_version
    assert len(ours.get_ca_certs()) == len(theirs.get_ca_certs()) > 0


def test_a_changed_ca_bundle_is_a_new_context(monkeypatch, tmp_path):
    before = tls()
    bundle = tmp_path / "ca.pem"
    # A bundle of one certificate: the system's first, as PEM.
    der = before.get_ca_certs(binary_form=True)[0]
    bundle.write_text(ssl.DER_cert_to_PEM_cert(der))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    after = tls()
    assert after is not before and len(after.get_ca_certs()) == 1
    monkeypatch.undo()
    assert tls() is before
