"""Secret resolution on real files: what is read, what is refused, and what a refusal says."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from controllers.errors import SecretRefused, SecretUnavailable
from controllers.secrets import SECRET_FILE_MAX_BYTES, resolve
from specs.models import SecretRef
from state import MASK, Redactor


def _ref(path: Path | str) -> SecretRef:
    return SecretRef(name="HF_TOKEN", fromFile=str(path))


def test_symlinked_secret_file_is_read_and_registered(tmp_path: Path) -> None:
    """Docker and Kubernetes mount secrets as symlinks: following them is the point."""
    value = "token-" + secrets.token_hex(8)
    target = tmp_path / "..data" / "token"
    target.parent.mkdir()
    target.write_text(value + "\r\n")
    link = tmp_path / "token"
    link.symlink_to(target)
    redactor = Redactor()
    assert resolve(_ref(link), redactor=redactor) == value
    assert redactor.scrub_text(f"x{value}x") == f"x{MASK}x"


def test_largest_allowed_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"k" * SECRET_FILE_MAX_BYTES)
    assert len(resolve(_ref(path), redactor=Redactor())) == SECRET_FILE_MAX_BYTES


@pytest.mark.parametrize(("content", "expected"), [
    (b"\xff\xfe-not-utf8-canary", "is not UTF-8 text"),
    (b"\n", "is empty"),
    (b"bell-canary\x07", "control character(s) U+0007"),
])
def test_unusable_content_is_refused_without_quoting_it(tmp_path: Path, content: bytes,
                                                        expected: str) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    with pytest.raises(SecretRefused) as info:
        resolve(_ref(path), redactor=Redactor())
    message = str(info.value)
    assert message.startswith("secret HF_TOKEN:") and expected in message
    assert "canary" not in message


def test_missing_file_is_unavailable_not_refused(tmp_path: Path) -> None:
    with pytest.raises(SecretUnavailable) as info:
        resolve(_ref(tmp_path / "absent"), redactor=Redactor())
    assert not isinstance(info.value, SecretRefused)
    assert "No such file or directory" in str(info.value)


def test_control_characters_from_the_environment_are_refused() -> None:
    ref = SecretRef(name="NGC_API_KEY", fromEnv="MY_KEY")
    with pytest.raises(SecretRefused) as info:
        resolve(ref, environ={"MY_KEY": "esc-canary\x1b[2J"}, redactor=Redactor())
    assert "environment variable MY_KEY" in str(info.value) and "U+001B" in str(info.value)
    assert "canary" not in str(info.value)
