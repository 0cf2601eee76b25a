"""Build the emulator's container image without any registry.

Why: the machines that build, test and CI-run this project reach package registries (Debian,
PyPI, npm) but no container registry, so ``FROM python:3.11-slim`` cannot be pulled. Instead the
base image is assembled from files this Debian host already has -- ``/usr/bin/python3.11``, its
standard library, the shared libraries ``ldd`` lists for it and its extension modules,
``/usr/bin/ffmpeg`` with its full ``ldd`` closure (the emulator decodes every registered RTSP
stream with it; about 250 MB of libraries), and a static busybox for a shell -- and imported with
``docker import``. The emulator
image is a ``docker build`` on top (legacy builder: there is no buildx here).

Why a content-hash tag (``local/rtvi-pybase:<hash>``): the hash covers the recipe version, every
input path with its size and mtime, and the image labels, so a repeated build finds the tag and
skips the import; an upgraded Debian package changes the hash and yields a fresh base.

Why merged-/usr normalisation: ``ldd`` reports ``/lib/x86_64-linux-gnu/libm.so.6``; Debian 12 has
``/lib -> usr/lib``. Copying such paths literally next to the ``/lib`` symlink creates loops that
break ``libm``. Every library is therefore copied (dereferenced) to its ``/usr/...`` path and
``/bin``, ``/lib``, ``/lib64``, ``/sbin`` become symlinks into ``/usr``, as on Debian.

Usage: ``python -m emulators.image [--label K=V ...] build-emulator [--tag TAG]`` prints the image
ID (``sha256:...``) on the last line of stdout, progress on stderr. ``build-base`` prints the base
tag.
Importable: :func:`build_base_image`, :func:`build_emulator_image`.

This module talks to Docker through the ``docker`` CLI (never docker-py) and imports nothing of the
product.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PYTHON_PACKAGE = "python3.11"
BUSYBOX_PACKAGE = "busybox-static"
FFMPEG_PACKAGE = "ffmpeg"
FFMPEG_BINARY = Path("/usr/bin/ffmpeg")
PYTHON_BINARY = Path("/usr/bin/python3.11")
PYTHON_STDLIB = Path("/usr/lib/python3.11")
BUSYBOX_BINARY = Path("/bin/busybox")
BASE_REPOSITORY = "local/rtvi-pybase"
DEFAULT_EMULATOR_TAG = "rtvi-emulator:dev"
BASE_TITLE = "rtvi-pybase"
EMULATOR_TITLE = "rtvi-emulator"
TITLE_LABEL = "org.opencontainers.image.title"
BASE_HASH_LABEL = "rtvi.image/base-hash"
RECIPE_VERSION = "2"  # bump when the root layout changes without any input file changing
HASH_HEX_CHARS = 16
# Not needed at run time: the test suite, GUI toolkits, third-party package folders, and the
# static libpython + Makefile under config-3.11-* (25 MB). Byte code goes in (not the ``-O``
# kind): each fresh container would compile every module it imports again (0.3 s of CPU).
SKIPPED_STDLIB_DIRS = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "tkinter",
        "turtledemo",
        "site-packages",
        "dist-packages",
    }
)
SKIPPED_STDLIB_DIR_PREFIXES = ("config-3.",)
OPTIMIZED_BYTECODE = ".opt-"  # ``python -O``'s byte code: not used
BUSYBOX_APPLETS = ("sh", "ls", "cat", "env", "ps", "sleep", "kill", "echo", "mkdir", "rm")
MERGED_USR_LINKS = (
    ("bin", "usr/bin"),
    ("lib", "usr/lib"),
    ("lib64", "usr/lib64"),
    ("sbin", "usr/sbin"),
)
ETC_FILES = (
    (
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    ),
    ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
    ("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"),
)
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EMULATOR_ROOT = "/opt/emu"
EMULATOR_PORT = 8000
# The healthcheck never uses a proxy, so it can only ever reach the container's own loopback.
# It sends the bearer token when the container enforces one (RTVI_EMU_API_TOKEN; the spec puts
# the health probes under bearer security too); the token stays inside the container.
# Why a bare socket and ``python3 -S -E``: Docker runs the check every second in every
# container. urllib plus site-packages cost ~60 ms of CPU per check, and 50 emulators then
# saturate two cores and time their own checks out; this costs a fraction of that. (The
# image's static busybox cannot do it: its wget crashes on the NSS lookups of static glibc.)
HEALTHCHECK_SCRIPT = (
    "import os, socket, sys\n"
    "port = int(os.environ.get('RTVI_EMU_PORT') or 8000)\n"
    "token = os.environ.get('RTVI_EMU_API_TOKEN', '').strip()\n"
    "auth = ('Authorization: Bearer ' + token + '\\r\\n') if token else ''\n"
    "try:\n"
    "    s = socket.create_connection(('127.0.0.1', port), timeout=2)\n"
    "    s.sendall(('GET /v1/health/ready HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n' + auth + '\\r\\n')"
    ".encode())\n"
    "    sys.exit(0 if s.recv(64).split(b' ')[1:2] == [b'200'] else 1)\n"
    "except OSError:\n"
    "    sys.exit(1)\n"
)
HEALTHCHECK_OPTIONS = "--interval={interval}s --timeout=2s --start-period=600s --retries=3"
# One check a second makes a lone emulator Ready fast; fifty of them on two cores spend most of
# the CPU in Docker's exec machinery, so fleets (bench/) ask for a longer interval.
DEFAULT_HEALTH_INTERVAL_S = 1
_LDD_LIBRARY = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-fA-F]+\)\s*$")
_LDD_MISSING = re.compile(r"^\s*(\S+)\s+=>\s+not found")


class ImageBuildError(RuntimeError):
    """Building an image failed; the message says what to install or which command failed."""


@dataclass(frozen=True)
class RootEntry:
    """One path of the base root: a copied file (``source``) or a symlink (``link``)."""

    dest: str  # relative to the root, e.g. "usr/lib/python3.11/os.py"
    source: Path | None = None
    link: str | None = None

    def fingerprint(self) -> str:
        if self.link is not None:
            return f"L {self.dest} -> {self.link}"
        assert self.source is not None
        info = self.source.stat()
        return f"F {self.dest} <- {self.source} {info.st_size} {info.st_mtime_ns} {info.st_mode:o}"


@dataclass(frozen=True)
class BaseImage:
    """The base tag, and whether this call imported it (False: it already existed)."""

    tag: str
    imported: bool


def _stderr_fd() -> int | None:
    """The real stderr descriptor for child progress output; None under capture (pytest)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _progress(message: str) -> None:
    print(f"[emulators.image] {message}", file=sys.stderr, flush=True)


def _require_sources() -> None:
    if not PYTHON_BINARY.is_file() or not (PYTHON_STDLIB / "os.py").is_file():
        raise ImageBuildError(
            f"{PYTHON_BINARY} or its standard library is missing: "
            f"install the Debian package {PYTHON_PACKAGE} (apt-get install -y {PYTHON_PACKAGE})"
        )
    if not FFMPEG_BINARY.is_file():
        raise ImageBuildError(
            f"{FFMPEG_BINARY} is missing: install the Debian package {FFMPEG_PACKAGE} "
            f"(apt-get install -y {FFMPEG_PACKAGE}); the emulator decodes RTSP with it"
        )
    if not BUSYBOX_BINARY.is_file():
        raise ImageBuildError(
            f"{BUSYBOX_BINARY} is missing: install the Debian package {BUSYBOX_PACKAGE} "
            f"(apt-get install -y {BUSYBOX_PACKAGE})"
        )
    for tool in ("ldd", "tar", "docker"):
        if shutil.which(tool) is None:
            raise ImageBuildError(f"the {tool!r} command is not on PATH")


def _usr_path(path: str) -> str:
    """Merged-/usr: ``/lib/x`` -> ``usr/lib/x`` (relative to the root)."""
    relative = path.lstrip("/")
    return relative if relative.startswith("usr/") else f"usr/{relative}"


def _stdlib_entries() -> tuple[list[RootEntry], list[Path]]:
    """Standard-library files and links, plus the extension modules that need ``ldd``."""
    entries: list[RootEntry] = []
    extensions: list[Path] = []
    for directory, subdirs, files in os.walk(PYTHON_STDLIB):
        subdirs[:] = sorted(
            name
            for name in subdirs
            if name not in SKIPPED_STDLIB_DIRS
            and not name.startswith(SKIPPED_STDLIB_DIR_PREFIXES)
            and not (Path(directory) / name).is_symlink()
        )
        for name in sorted(files):
            if OPTIMIZED_BYTECODE in name:
                continue
            path = Path(directory) / name
            dest = _usr_path(str(path))
            if path.is_symlink():
                target = os.readlink(path)
                resolved = path.resolve()
                inside = resolved.is_relative_to(PYTHON_STDLIB) and not os.path.isabs(target)
                if inside and resolved.exists():
                    entries.append(RootEntry(dest, link=target))
                    continue
                if not resolved.is_file():
                    continue  # dangling link: nothing to copy
            entries.append(RootEntry(dest, source=path))
            if path.parent.name == "lib-dynload" and name.endswith(".so"):
                extensions.append(path)
    return entries, extensions


def _ldd(binaries: Sequence[Path]) -> dict[Path, tuple[set[str], set[str]]]:
    """Per binary: (library paths, missing library names). Static binaries have neither."""
    result = subprocess.run(
        ["ldd", *map(str, binaries)], capture_output=True, text=True, check=False
    )
    found: dict[Path, tuple[set[str], set[str]]] = {path: (set(), set()) for path in binaries}
    current = binaries[0] if len(binaries) == 1 else None
    for line in result.stdout.splitlines():
        if not line.startswith(("\t", " ")) and line.endswith(":"):
            current = Path(line[:-1])
            continue
        if current is None or current not in found:
            continue
        missing = _LDD_MISSING.match(line)
        if missing:
            found[current][1].add(missing.group(1))
            continue
        library = _LDD_LIBRARY.match(line)
        if library:
            found[current][0].add(library.group(1))
    return found


def plan_base_root() -> list[RootEntry]:
    """Every path of the base root, in a stable order. Pure apart from reading the host."""
    _require_sources()
    entries, extensions = _stdlib_entries()
    binaries = [PYTHON_BINARY, BUSYBOX_BINARY, FFMPEG_BINARY, *extensions]
    libraries: set[str] = set()
    dropped: set[str] = set()
    for binary, (paths, missing) in _ldd(binaries).items():
        if missing:
            if binary in (PYTHON_BINARY, BUSYBOX_BINARY, FFMPEG_BINARY):
                raise ImageBuildError(
                    f"{binary} needs libraries that are not installed: {', '.join(sorted(missing))}"
                )
            dropped.add(_usr_path(str(binary)))  # an optional module whose libraries are absent
            continue
        libraries |= paths
    if dropped:
        _progress(f"leaving out extension modules with missing libraries: {sorted(dropped)}")
        entries = [entry for entry in entries if entry.dest not in dropped]
    for library in sorted(libraries):
        entries.append(RootEntry(_usr_path(library), source=Path(library).resolve()))
    entries.append(RootEntry("usr/bin/python3.11", source=PYTHON_BINARY))
    entries.append(RootEntry("usr/bin/python3", link="python3.11"))
    entries.append(RootEntry("usr/bin/python", link="python3.11"))
    entries.append(RootEntry("usr/bin/ffmpeg", source=FFMPEG_BINARY.resolve()))
    entries.append(RootEntry("usr/bin/busybox", source=BUSYBOX_BINARY.resolve()))
    entries += [RootEntry(f"usr/bin/{applet}", link="busybox") for applet in BUSYBOX_APPLETS]
    unique = {entry.dest: entry for entry in entries}
    return [unique[dest] for dest in sorted(unique)]


def _base_hash(entries: Iterable[RootEntry], labels: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    digest.update(f"recipe {RECIPE_VERSION}\n".encode())
    for entry in entries:
        digest.update(entry.fingerprint().encode("utf-8", "surrogateescape") + b"\n")
    for dest, content in ETC_FILES:
        digest.update(f"E {dest} {hashlib.sha256(content.encode()).hexdigest()}\n".encode())
    digest.update(json.dumps(sorted(labels.items())).encode())
    return digest.hexdigest()[:HASH_HEX_CHARS]


def _docker(
    *args: str,
    stdin: int | None = None,
    env: Mapping[str, str] | None = None,
    stdout: int | None = subprocess.PIPE,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args],
        stdin=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


def image_exists(reference: str) -> bool:
    return _docker("image", "inspect", "--format", "{{.Id}}", reference).returncode == 0


def image_id(reference: str) -> str:
    result = _docker("image", "inspect", "--format", "{{.Id}}", reference)
    if result.returncode != 0:
        raise ImageBuildError(f"docker image inspect {reference} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def _assemble(root: Path, entries: Sequence[RootEntry]) -> None:
    for entry in entries:
        target = root / entry.dest
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.link is not None:
            target.symlink_to(entry.link)
        else:
            assert entry.source is not None
            shutil.copy2(entry.source, target)
    for dest, content in ETC_FILES:
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        (root / dest).write_text(content)
    for name in ("usr/sbin", "usr/lib64", "usr/local/bin", "root", "tmp"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "root").chmod(0o700)
    (root / "tmp").chmod(0o1777)
    for name, link in MERGED_USR_LINKS:
        (root / name).symlink_to(link)


def _import(root: Path, tag: str, labels: Mapping[str, str]) -> None:
    changes = [f"ENV PATH={IMAGE_PATH}", "ENV LANG=C.UTF-8"]
    changes += [f"LABEL {json.dumps(key)}={json.dumps(value)}" for key, value in labels.items()]
    change_args = [arg for change in changes for arg in ("--change", change)]
    tar = subprocess.Popen(
        ["tar", "-C", str(root), "--numeric-owner", "--owner=0", "--group=0", "-cf", "-", "."],
        stdout=subprocess.PIPE,
    )
    assert tar.stdout is not None
    try:
        result = _docker("import", *change_args, "-", tag, stdin=tar.stdout.fileno())
    finally:
        tar.stdout.close()
        tar_code = tar.wait()
    if tar_code != 0 or result.returncode != 0:
        raise ImageBuildError(
            f"importing {tag} failed (tar exit {tar_code}): {result.stderr.strip()}"
        )


def ensure_base_image(
    repository: str = BASE_REPOSITORY, labels: Mapping[str, str] | None = None
) -> BaseImage:
    """Import the base unless ``repository:<content hash>`` exists already."""
    all_labels = {TITLE_LABEL: BASE_TITLE, **(labels or {})}
    entries = plan_base_root()
    content_hash = _base_hash(entries, all_labels)
    tag = f"{repository}:{content_hash}"
    if image_exists(tag):
        _progress(f"base {tag} exists; reusing it")
        return BaseImage(tag, imported=False)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rtvi-pybase-") as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        _assemble(root, entries)
        _import(root, tag, {**all_labels, BASE_HASH_LABEL: content_hash})
    _progress(f"imported base {tag} ({len(entries)} paths) in {time.monotonic() - started:.1f} s")
    return BaseImage(tag, imported=True)


def build_base_image(
    repository: str = BASE_REPOSITORY, labels: Mapping[str, str] | None = None
) -> str:
    """The base image's tag (``local/rtvi-pybase:<hash>``), importing it only when missing."""
    return ensure_base_image(repository, labels).tag


def emulator_dockerfile(base_tag: str, health_interval_s: int = DEFAULT_HEALTH_INTERVAL_S) -> str:
    healthcheck = json.dumps(["python3", "-S", "-E", "-c", HEALTHCHECK_SCRIPT])
    return (
        f"FROM {base_tag}\n"
        f"COPY emulators {EMULATOR_ROOT}/emulators\n"
        f"ENV PYTHONPATH={EMULATOR_ROOT} PYTHONUNBUFFERED=1\n"
        f"EXPOSE {EMULATOR_PORT}\n"
        f"LABEL {TITLE_LABEL}={EMULATOR_TITLE}\n"
        f"HEALTHCHECK {HEALTHCHECK_OPTIONS.format(interval=health_interval_s)} CMD {healthcheck}\n"
        'ENTRYPOINT ["python3", "-m", "emulators.rtvi"]\n'
    )


def _copy_emulator_sources(context: Path) -> None:
    """Only ``emulators/__init__.py`` and ``emulators/rtvi/``: the image needs nothing else."""
    package = Path(__file__).resolve().parent
    destination = context / "emulators"
    destination.mkdir()
    shutil.copy2(package / "__init__.py", destination / "__init__.py")
    shutil.copytree(
        package / "rtvi",
        destination / "rtvi",
        ignore=shutil.ignore_patterns(f"*{OPTIMIZED_BYTECODE}*"),  # current byte code goes in
    )


def build_emulator_image(
    tag: str = DEFAULT_EMULATOR_TAG,
    *,
    labels: Mapping[str, str] | None = None,
    base_repository: str = BASE_REPOSITORY,
    health_interval_s: int = DEFAULT_HEALTH_INTERVAL_S,
) -> str:
    """Build the RTVI emulator image, tag it ``tag`` and return its ID (``sha256:...``).

    ``labels`` go on the image (and on its base when the base has to be imported), e.g. so tests
    can remove what they built by label.
    """
    base_tag = build_base_image(base_repository, labels)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rtvi-emulator-ctx-") as scratch:
        context = Path(scratch)
        _copy_emulator_sources(context)
        (context / "Dockerfile").write_text(emulator_dockerfile(base_tag, health_interval_s))
        label_args = [arg for k, v in (labels or {}).items() for arg in ("--label", f"{k}={v}")]
        progress_fd = _stderr_fd()
        result = _docker(
            "build",
            "--rm",
            "--force-rm",
            *label_args,
            "-t",
            tag,
            str(context),
            env={"DOCKER_BUILDKIT": "0"},
            stdout=subprocess.PIPE if progress_fd is None else progress_fd,
        )
    if progress_fd is None and result.stdout:
        sys.stderr.write(result.stdout)
    if result.returncode != 0:
        raise ImageBuildError(f"docker build of {tag} failed: {result.stderr.strip()}")
    built = image_id(tag)
    _progress(f"built {tag} ({built}) in {time.monotonic() - started:.1f} s")
    return built


def _parse_label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.image", description="Build container images without a registry."
    )
    parser.add_argument("--base-repository", default=BASE_REPOSITORY)
    parser.add_argument(
        "--label",
        type=_parse_label,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label for the image (and for the base when it has to be imported); repeatable",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    emulator = commands.add_parser("build-emulator", help="build the RTVI emulator image")
    emulator.add_argument("--tag", default=DEFAULT_EMULATOR_TAG)
    commands.add_parser("build-base", help="import the python3.11 + busybox base image")
    args = parser.parse_args(argv)
    labels = dict(args.label)
    try:
        if args.command == "build-base":
            print(build_base_image(args.base_repository, labels))
        else:
            print(
                build_emulator_image(args.tag, labels=labels, base_repository=args.base_repository)
            )
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
