"""Signed manifests for fleets (issue 13): an unsigned, altered or foreign-signed manifest is
refused by `verify --public-key`, `run --public-key` and Session(public_key=...)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.errors import ManifestError
from edgeserve.manifest.record import stamp
from edgeserve.runtime import Session

MODEL = "tflm/hello_world_int8.tflite"


def keypair(folder: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def signed(testdata: Path, digits_conversion: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    pytest.importorskip("cryptography")
    folder = tmp_path_factory.mktemp("signing")
    private, public = keypair(folder, "fleet")
    out = folder / "OUT"
    shutil.copytree(digits_conversion, out)
    from edgeserve.manifest.signing import sign_manifest

    sign_manifest(out / "manifest.json", private)
    return out, public, keypair(folder, "other")[1]


def test_a_signed_manifest_is_served_and_verified(signed: tuple[Path, Path, Path]) -> None:
    out, public, _ = signed
    assert CliRunner().invoke(cli, ["verify", str(out), "--public-key", str(public)]).exit_code == 0
    with Session(out, public_key=public) as session:
        assert session.backend.startswith("litert:")


@pytest.mark.parametrize("case", ["unsigned", "altered", "other key", "bare model file"])
def test_anything_else_is_refused(signed: tuple[Path, Path, Path], tmp_path: Path, case: str) -> None:
    out, public, other = signed
    copy = tmp_path / "OUT"
    shutil.copytree(out, copy)
    key, target = public, copy
    if case == "unsigned":
        (copy / "manifest.json.sig").unlink()
        expected = "is not signed"
    elif case == "altered":  # re-stamped, so only the signature can tell
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["labels"] = ["cat"] * 10
        (copy / "manifest.json").write_text(json.dumps(stamp(manifest)))
        expected = "the signature does not match"
    elif case == "other key":
        key, expected = other, "the signature does not match"
    else:
        target, expected = copy / "model_int8.tflite", "bare model file"
    with pytest.raises(ManifestError, match=expected):
        Session(target, public_key=key)
    result = CliRunner().invoke(cli, ["run", str(target), "--input", str(copy / "model_int8.tflite"),
                                      "--public-key", str(key)])
    assert result.exit_code == 1 and expected in result.stderr
    if case != "bare model file":
        verified = CliRunner().invoke(cli, ["verify", str(copy), "--public-key", str(key)])
        assert verified.exit_code == 1 and expected in verified.stderr


def test_convert_signs_and_a_bad_key_fails_before_any_work(testdata: Path, tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    private, public = keypair(tmp_path, "k")
    out = tmp_path / "OUT"
    args = ["convert", str(testdata / MODEL), "-t", "mcu", "--no-fit-check", "-o", str(out)]
    assert CliRunner().invoke(cli, [*args, "--sign-key", str(private)]).exit_code == 0
    assert (out / "manifest.json.sig").is_file()
    assert CliRunner().invoke(cli, ["verify", str(out), "--public-key", str(public)]).exit_code == 0
    bad = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "OUT2"), "--sign-key", str(public)])
    assert bad.exit_code == 1 and "is not a PEM private key" in bad.stderr and not (tmp_path / "OUT2").exists()
    # Converting again without a key leaves no signature of a manifest that no longer exists.
    assert CliRunner().invoke(cli, [*args, "--name", "again"]).exit_code == 0
    assert not (out / "manifest.json.sig").exists()
