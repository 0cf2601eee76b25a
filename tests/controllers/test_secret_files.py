"""Secret resolution on real files: what is read, what is refused, and what a refusal says."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from controllers.errors import SecretRefused, SecretUnavailable
from controllers.secrets import SECRET_FILE_MAX_BYTES, api_token, resolve
from specs.models import DeploymentSpec, SecretRef
from state import MASK, Redactor
from tests.specs_factory import deployment


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
    assert message.startswith("secret HF_TOKEN:")
    assert expected in message
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
    assert "environment variable MY_KEY" in str(info.value)
    assert "U+001B" in str(info.value)
    assert "canary" not in str(info.value)


def _refusal(ref: SecretRef, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(SecretUnavailable) as info:
        resolve(ref, environ, redactor=Redactor())
    return str(info.value)


def test_what_is_not_a_regular_file_is_named_for_what_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases: list[tuple[Path | str, str]] = [
        (folder, "a directory"), (fifo, "a FIFO (named pipe)"),
        ("/dev/null", "a character device")]
    for path, kind in cases:  # a socket cannot even be opened
        assert _refusal(_ref(path)) == (f"secret HF_TOKEN: {path} is {kind}; secrets are "
                                        "read only from regular files")


def test_a_file_over_the_cap_is_refused_by_its_size_or_by_what_it_gave(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"k" * (SECRET_FILE_MAX_BYTES + 1))
    too_big = "bytes; a secret file holds one token or key"
    assert _refusal(_ref(big)) == (f"secret HF_TOKEN: {big} is larger than "
                                   f"{SECRET_FILE_MAX_BYTES} {too_big}")
    # A /proc file says 0 bytes to fstat and gives megabytes: the read itself is capped.
    assert _refusal(_ref("/proc/kallsyms")) == (
        f"secret HF_TOKEN: /proc/kallsyms is larger than {SECRET_FILE_MAX_BYTES} {too_big}")


def test_a_file_that_cannot_be_opened_or_read_says_why(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    assert _refusal(_ref(missing)) == (
        f"secret HF_TOKEN: cannot read {missing}: No such file or directory")
    assert _refusal(_ref("/proc/self/mem")) == (  # opens, then fails to read at offset 0
        "secret HF_TOKEN: cannot read /proc/self/mem: Input/output error")
    nul = SecretRef.model_construct(name="HF_TOKEN", fromFile="/tmp/a\x00b", fromEnv=None)
    assert _refusal(nul) == "secret HF_TOKEN: cannot read /tmp/a\x00b: embedded null byte"


def test_environment_references_and_their_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = SecretRef(name="NGC_API_KEY", fromEnv="MY_KEY")
    assert _refusal(ref, {}) == ("secret NGC_API_KEY: environment variable MY_KEY is not set "
                                 "in the reconciler's environment")
    monkeypatch.setenv("MY_KEY", "from-the-process-env")
    assert resolve(ref, redactor=Redactor()) == "from-the-process-env"  # os.environ by default
    assert _refusal(ref, {"MY_KEY": "a\x00b\x07-canary"}) == (
        "secret NGC_API_KEY: the value from environment variable MY_KEY contains control "
        "character(s) NUL, U+0007; only tab, newline and carriage return are allowed (Docker "
        "cannot pass NUL at all)")
    neither = SecretRef.model_construct(name="X", fromEnv=None, fromFile=None)
    assert _refusal(neither) == "secret X: no source given"


def test_only_line_endings_are_trimmed_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(" token \r\n")
    assert resolve(_ref(path), redactor=Redactor()) == " token "
    path.write_text("tokenX\n")
    assert resolve(_ref(path), redactor=Redactor()) == "tokenX"
    path.write_text("\n")
    assert _refusal(_ref(path)) == (f"secret HF_TOKEN: the referenced value (file {path}) "
                                    "is empty")


def _spec(**extra: object) -> DeploymentSpec:
    doc = deployment("vlm", "rtvi-emulator@sha256:" + "ab" * 32, 18000, **extra)
    return DeploymentSpec.model_validate(doc["spec"])


def test_the_api_token_is_the_named_reference_and_a_header_safe_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert api_token(_spec()) is None
    secrets_ = [{"name": "other", "fromEnv": "OTHER"}, {"name": "api", "fromEnv": "API"}]
    monkeypatch.setenv("API", "tok-123")
    monkeypatch.setenv("OTHER", "not-this-one")
    assert api_token(_spec(secrets=secrets_, apiTokenSecret="api")) == "tok-123"
    monkeypatch.setenv("API", "tok 123")
    with pytest.raises(SecretRefused) as info:
        api_token(_spec(secrets=secrets_, apiTokenSecret="api"))
    assert str(info.value) == ("secret api: an API token cannot contain whitespace (it is sent "
                               "as an HTTP header)")
    dangling = _spec(secrets=secrets_).model_copy(update={"apiTokenSecret": "gone"})
    with pytest.raises(SecretUnavailable) as missing:
        api_token(dangling)  # validate refuses this; an old record's applied spec may say it
    assert str(missing.value) == "apiTokenSecret gone names no entry of spec.secrets"
