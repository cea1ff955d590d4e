"""Ed25519 signatures of a manifest, for fleets that must run only what their build signed.

``manifest_sha256`` catches an edited or damaged manifest, but anyone can re-stamp it. A
signature cannot be re-made without the private key: `convert --sign-key` writes
``manifest.json.sig`` (the Ed25519 signature of the manifest file's bytes, base64) and
`verify --public-key`, `run --public-key` and ``Session(public_key=...)`` refuse a manifest
that is unsigned, altered, or signed with another key. Since the manifest holds the sha256
of every artifact, the signature covers the artifacts too.

Keys are PEM files, as OpenSSL makes them::

    openssl genpkey -algorithm ed25519 -out signing_key.pem
    openssl pkey -in signing_key.pem -pubout -out signing_key.pub.pem
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from typing import Any

from edgeserve._deps import require
from edgeserve.atomic import read_settings, write_text
from edgeserve.errors import InputError, ManifestError

SIGNATURE_SUFFIX = ".sig"


def signature_path(manifest: Path) -> Path:
    return manifest.with_name(manifest.name + SIGNATURE_SUFFIX)


def _load_key(path: str | os.PathLike[str], private: bool) -> Any:
    require("cryptography", "manifest signatures")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    kind = "private" if private else "public"
    try:
        data = read_settings(path)
    except OSError as exc:
        raise InputError(f"cannot read the {kind} key {path}: {exc.strerror or exc}") from exc
    try:
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path} is not a PEM {kind} key without a passphrase: {exc}") from exc
    wanted = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, wanted):
        raise InputError(f"{path} is a {type(key).__name__.lstrip('_')}; expected an Ed25519 {kind} key "
                         "(openssl genpkey -algorithm ed25519)")
    return key


def sign_manifest(manifest: Path, private_key: str | os.PathLike[str]) -> Path:
    """Write ``manifest.json.sig`` beside ``manifest``; returns its path."""
    key = _load_key(private_key, private=True)
    signature = key.sign(manifest.read_bytes())
    return write_text(signature_path(manifest), base64.b64encode(signature).decode() + "\n")


def check_signature(manifest: Path, public_key: str | os.PathLike[str]) -> None:
    """Raise :class:`ManifestError` unless ``manifest`` carries a valid signature by ``public_key``."""
    key = _load_key(public_key, private=False)
    from cryptography.exceptions import InvalidSignature

    sig_path = signature_path(manifest)
    if not sig_path.is_file():
        raise ManifestError(f"{manifest} is not signed (no {sig_path.name}), and a public key was given: "
                            "only signed manifests are accepted")
    try:
        signature = base64.b64decode(sig_path.read_text().strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ManifestError(f"{sig_path} is not a base64 signature: {exc}") from exc
    try:
        key.verify(signature, manifest.read_bytes())
    except InvalidSignature as exc:
        raise ManifestError(f"{manifest}: the signature does not match: the manifest was altered after it was "
                            f"signed, or signed with another key than {public_key}") from exc
