"""Container roots planned from this Debian machine's own files, imported without a registry.

Why host files: no container registry is reachable, so there is no ``FROM debian``. An image we
ship to a Host (the publisher, the experiment runner) is a root assembled from files this machine
already has: Debian's python3.11, its standard library, what an image adds, and every shared
library ``ldd`` says they load. The plan is a mapping ``destination -> Item``; it is pure apart
from reading the host, so its fingerprint decides whether an image must be rebuilt, and the tar
written from it is imported over the Docker API (so it also reaches a remote engine).

Why merged-/usr: ``ldd`` names ``/lib/x86_64-linux-gnu/libc.so.6`` while Debian 12 has
``/lib -> usr/lib``; every library is stored under ``usr/`` (dereferenced, so alternatives and
versioned links become plain files at the name the loader asks for) and ``/lib``, ``/lib64``,
``/bin``, ``/sbin`` are symlinks into ``usr/``, as on the host.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from controllers.clients.docker_client import DockerEngine

PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
# Not needed to run: tests, GUI toolkits, the static libpython under config-3.11-*.
STDLIB_SKIP = ("test", "tests", "idlelib", "tkinter", "turtledemo",
               "site-packages", "dist-packages", "lib2to3", "ensurepip")
OPTIMIZED_BYTECODE = ".opt-"
"""Byte code for ``python -O`` only (``x.cpython-311.opt-1.pyc``): left out. The plain byte
code goes in: a container starts with a fresh filesystem, so without it every start compiles
each module it imports from source again (0.3 s of CPU for a publisher's standard library,
2 s for a runner's matplotlib and pydantic), and the runner may not even write it. It is
used only while it matches its source (size and time, kept in the image)."""
ROOT_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}


@dataclass(frozen=True)
class Item:
    """A file copied from ``source``, or a symlink pointing at ``link``."""

    source: Path | None = None
    link: str | None = None

    def fingerprint(self) -> str:
        if self.source is None:
            return f"-> {self.link}"
        stat = self.source.stat()
        return f"{self.source} {stat.st_size} {stat.st_mtime_ns} {stat.st_mode:o}"


def in_usr(path: Path | str) -> str:
    """Destination of a host path under merged-/usr, relative to the root."""
    text = str(path).lstrip("/")
    return text if text.startswith("usr/") else "usr/" + text


def ldd_closure(objects: list[Path]) -> tuple[set[str], list[str]]:
    """Libraries the objects load (as the loader names them), and 'object: lib' misses."""
    done = subprocess.run(["ldd", *map(str, objects)], capture_output=True, text=True,
                          check=False)
    libraries: set[str] = set()
    missing: list[str] = []
    owner = str(objects[0])
    for line in done.stdout.splitlines():
        if not line[:1].isspace():
            owner = line.rstrip(":")
            continue
        words = line.split()
        if "not" in words and "found" in words:
            missing.append(f"{owner}: {words[0]}")
        elif "=>" in words and len(words) >= 3 and words[2].startswith("/"):
            libraries.add(words[2])
        elif words and words[0].startswith("/"):
            libraries.add(words[0])  # the dynamic loader itself
    return libraries, missing


def package_files(top: Path, skip: tuple[str, ...]) -> dict[str, Item]:
    """Regular files (and in-tree relative links) of a Python package tree, at their host
    paths under merged-/usr."""
    items: dict[str, Item] = {}
    for path in sorted(top.rglob("*")):
        relative = path.relative_to(top)
        if any(part in skip or part.startswith("config-3.") for part in relative.parts):
            continue
        if OPTIMIZED_BYTECODE in path.name:
            continue
        if path.is_symlink():
            target = path.resolve()
            if target.is_file():
                items[in_usr(path)] = Item(source=target)
        elif path.is_file():
            items[in_usr(path)] = Item(source=path)
    return items


def python_root() -> dict[str, Item]:
    """Debian's python3.11 and its standard library (no libraries yet: see ``with_libraries``)."""
    items = package_files(STDLIB, STDLIB_SKIP)
    items[in_usr(PYTHON)] = Item(source=PYTHON.resolve())
    items["usr/bin/python3"] = Item(link="python3.11")
    return items


def with_libraries(items: dict[str, Item], binaries: list[Path],
                   bundled: tuple[Path, ...] = ()) -> tuple[dict[str, Item], list[str]]:
    """``items`` plus every library ``binaries`` and the plan's own ``.so`` files load; a
    library under one of ``bundled`` (a wheel's ``*.libs`` folder) is already in the plan.
    Returns the completed plan and the 'object: lib' misses."""
    objects = [*binaries, *(item.source for dest, item in items.items()
                            if item.source is not None and ".so" in Path(dest).name)]
    libraries, missing = ldd_closure(objects)
    done = dict(items)
    for library in libraries:
        if not any(Path(library).is_relative_to(top) for top in bundled):
            done[in_usr(library)] = Item(source=Path(library).resolve())
    return dict(sorted(done.items())), missing


def fingerprint(items: dict[str, Item], extra: str) -> str:
    """Content hash of a plan: what changes it (a Debian upgrade, an edited source, a new
    recipe) gives a new image tag; nothing else does."""
    digest = hashlib.sha256(extra.encode())
    for dest, item in items.items():
        digest.update(f"{dest} {item.fingerprint()}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _directory(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    tar.addfile(info)


def write_root(tar: tarfile.TarFile, items: dict[str, Item]) -> None:
    """Parents before children, root-owned, then the merged-/usr links and a tiny /etc."""
    made: set[str] = set()
    for dest, item in items.items():
        parents = Path(dest).parents
        for parent in reversed(parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                _directory(tar, str(parent))
        if item.link is not None:
            info = tarfile.TarInfo(dest)
            info.type = tarfile.SYMTYPE
            info.linkname = item.link
            tar.addfile(info)
            continue
        assert item.source is not None
        info = tar.gettarinfo(str(item.source), arcname=dest)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        with open(item.source, "rb") as handle:
            tar.addfile(info, handle)
    _directory(tar, "tmp", 0o1777)
    _directory(tar, "etc")
    for name in ("usr/sbin", "usr/lib64"):
        if name not in made:
            _directory(tar, name)
    for name, target in ROOT_LINKS.items():
        info = tarfile.TarInfo(name)
        info.type = tarfile.SYMTYPE
        info.linkname = target
        tar.addfile(info)
    passwd = b"root:x:0:0:root:/tmp:/usr/bin/python3\n"
    info = tarfile.TarInfo("etc/passwd")
    info.size = len(passwd)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(passwd))


def ensure_image(engine: DockerEngine, tag: str, items: dict[str, Item],
                 changes: Callable[[str], list[str]], lock: threading.Lock) -> str:
    """The ID of ``repository:<content hash>`` (``tag``) on ``engine``, importing the root
    ``items`` only when the tag is missing there; ``changes(content_hash)`` gives the image's
    ENV/LABEL/ENTRYPOINT lines. Progress goes to stderr (an import takes seconds)."""
    with lock:
        existing = engine.image(tag)
        if existing is not None:
            return existing.id
        started = time.monotonic()
        repository, content_hash = tag.split(":", 1)
        with tempfile.NamedTemporaryFile(prefix=f"{repository}-", suffix=".tar") as scratch:
            with tarfile.open(fileobj=scratch, mode="w", format=tarfile.GNU_FORMAT) as tar:
                write_root(tar, items)
            scratch.flush()
            image_id = engine.import_image(Path(scratch.name), repository, content_hash,
                                           changes(content_hash))
        print(f"[{repository}] imported {tag} ({len(items)} files) on Host {engine.host_name} "
              f"in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        return image_id
