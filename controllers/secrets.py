"""Resolve secret references at the moment of use.

Values go straight into a container-create call and into the process-wide redactor (so any
log, event or error that later mentions them is scrubbed); they are never returned to callers
that store or print things.

A ``fromFile`` reference is read defensively, because the path is only a string in a spec: it
may name ``/dev/zero`` (endless), a FIFO (blocks until a writer comes), a directory, or a file
of any size. The file is opened without blocking, judged by ``fstat`` on the opened descriptor
(what we read is what we judged; no race with a rename), read only if it is a regular file of
at most ``SECRET_FILE_MAX_BYTES``, and the whole read runs under a deadline so even a stuck
filesystem cannot hold ``apply`` past its ``--timeout``.

Errors name the reference (and the file's path, which is no secret), never the value.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Mapping

from controllers.errors import SecretRefused, SecretUnavailable
from specs.environment import control_characters
from specs.models import DeploymentSpec, SecretRef
from specs.trust import enforced
from state.redaction import DEFAULT_REDACTOR, Redactor

SECRET_FILE_MAX_BYTES = 64 * 1024
"""Largest secret file we read: tokens and keys are far smaller; anything bigger is a mistake."""
SECRET_READ_TIMEOUT_S = 5.0
"""Longest a secret file read may take when the caller has no nearer deadline. A regular file
of 64 KiB reads in microseconds; only a hung (network) filesystem comes near this."""
READ_CHUNK_BYTES = 16 * 1024
# O_NONBLOCK: opening a FIFO must not wait for a writer. O_NOCTTY: opening a terminal device
# must not make it ours. No O_NOFOLLOW: mounted secrets (Docker, Kubernetes) are symlinks, and
# fstat judges the target we actually opened anyway.
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
              (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
              (stat.S_ISSOCK, "a socket"))


def resolve(ref: SecretRef, environ: Mapping[str, str] | None = None,
            redactor: Redactor = DEFAULT_REDACTOR, deadline: float | None = None) -> str:
    """Return the value of one reference and register it for redaction.

    ``deadline`` (``time.monotonic()`` seconds) bounds a file read. Raises
    ``SecretUnavailable`` when the value is missing and its subclass ``SecretRefused`` when
    it exists but cannot be used (not a regular file, too large, not UTF-8, control
    characters, empty)."""
    env = os.environ if environ is None else environ
    if ref.fromEnv is not None:
        value = env.get(ref.fromEnv)
        if value is None:
            raise SecretUnavailable(f"secret {ref.name}: environment variable {ref.fromEnv} is "
                                    "not set in the reconciler's environment")
        source = f"environment variable {ref.fromEnv}"
    elif ref.fromFile is not None:
        value = read_secret_file(ref, deadline).rstrip("\r\n")
        source = f"file {ref.fromFile}"
    else:
        raise SecretUnavailable(f"secret {ref.name}: no source given")
    # Registered before judging: should a caller ever print more than our message, the
    # value is already masked.
    redactor.register(value)
    if not value:
        raise SecretRefused(f"secret {ref.name}: the referenced value ({source}) is empty")
    refused = control_characters(value)
    if refused:
        raise SecretRefused(f"secret {ref.name}: the value from {source} contains control "
                            f"character(s) {', '.join(refused)}; only tab, newline and carriage "
                            "return are allowed (Docker cannot pass NUL at all)")
    return value


def api_token(spec: DeploymentSpec, deadline: float | None = None) -> str | None:
    """The service's API token (the ``spec.secrets`` entry ``spec.apiTokenSecret`` names),
    resolved now; None when the Deployment has none. It travels only in request headers."""
    if spec.apiTokenSecret is None:
        return None
    ref = next((r for r in spec.secrets if r.name == spec.apiTokenSecret), None)
    if ref is None:  # validate refuses this; an old record's applied spec might still say it
        raise SecretUnavailable(f"apiTokenSecret {spec.apiTokenSecret} names no entry of "
                                "spec.secrets")
    token = resolve(ref, deadline=deadline)
    if any(c.isspace() for c in token):
        raise SecretRefused(f"secret {ref.name}: an API token cannot contain whitespace (it is "
                            "sent as an HTTP header)")
    return token


def resolve_all(refs: list[SecretRef], environ: Mapping[str, str] | None = None,
                deadline: float | None = None) -> dict[str, str]:
    return {ref.name: resolve(ref, environ, deadline=deadline) for ref in refs}


def read_secret_file(ref: SecretRef, deadline: float | None = None) -> str:
    """Read ``ref.fromFile`` as UTF-8 text, in a helper thread joined until ``deadline``.

    The helper is a daemon thread: if the filesystem never answers, it is abandoned (it holds
    no lock and writes nowhere) rather than holding the caller or the process's exit."""
    assert ref.fromFile is not None
    limit = time.monotonic() + SECRET_READ_TIMEOUT_S
    wait_s = max(0.0, min(limit, deadline if deadline is not None else limit) - time.monotonic())
    outcome: list[bytes | SecretUnavailable] = []
    reader = threading.Thread(target=_read_into, args=(ref, outcome), daemon=True,
                              name=f"secret-{ref.name}")
    reader.start()
    reader.join(wait_s)
    if not outcome:
        raise SecretRefused(f"secret {ref.name}: reading {ref.fromFile} did not finish within "
                            f"{wait_s:.1f}s (a hung filesystem?)")
    result = outcome[0]
    if isinstance(result, SecretUnavailable):
        raise result
    try:
        return result.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretRefused(f"secret {ref.name}: {ref.fromFile} is not UTF-8 text") from None


def _read_into(ref: SecretRef, outcome: list[bytes | SecretUnavailable]) -> None:
    try:
        outcome.append(_read_regular(ref))
    except SecretUnavailable as exc:
        outcome.append(exc)


def _read_regular(ref: SecretRef) -> bytes:
    path = str(ref.fromFile)
    try:
        fd = os.open(path, OPEN_FLAGS)
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SecretUnavailable(f"secret {ref.name}: cannot read {path}: {reason}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in FILE_KINDS if test(info.st_mode)),
                        "not a regular file")
            raise SecretRefused(f"secret {ref.name}: {path} is {kind}; secrets are read only "
                                "from regular files")
        _within_trust(ref, fd)
        if info.st_size > SECRET_FILE_MAX_BYTES:
            raise SecretRefused(f"secret {ref.name}: {path} is larger than "
                                f"{SECRET_FILE_MAX_BYTES} bytes; a secret file holds one token "
                                "or key")
        data = _read_capped(fd)
    except OSError as exc:
        raise SecretUnavailable(f"secret {ref.name}: cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > SECRET_FILE_MAX_BYTES:
        raise SecretRefused(f"secret {ref.name}: {path} is larger than {SECRET_FILE_MAX_BYTES} "
                            "bytes; a secret file holds one token or key")
    return data


def _within_trust(ref: SecretRef, fd: int) -> None:
    """The file actually opened (``/proc/self/fd``: no check-then-use window) lies in a folder
    the operator lets secrets be read from: a symlink planted there after validation is not
    followed out of it. Skipped where no policy is enforced (library callers)."""
    policy = enforced()
    if policy is None:
        return
    real = os.readlink(f"/proc/self/fd/{fd}")
    if not policy.holds("secrets", real):
        raise SecretRefused(f"secret {ref.name}: {ref.fromFile} leads to {real}, outside the "
                            "folders secrets may be read from (trust boundary)")


def _read_capped(fd: int) -> bytes:
    """Up to one byte past the cap (so "too large" is seen even if fstat's size was stale)."""
    chunks: list[bytes] = []
    total = 0
    while total <= SECRET_FILE_MAX_BYTES:
        chunk = os.read(fd, READ_CHUNK_BYTES)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
