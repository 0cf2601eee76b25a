"""Hostile spec input: every file is refused quickly, located, with the limit or rule named.

Loading is all or nothing: a folder or file that cannot be read refuses the whole set (skipping
it would make its resources look deleted). Tests that need a folder root cannot read drop the
DAC capabilities in a child process (CI runs as root, which reads everything otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specs.errors import SpecError
from specs.loader import (
    LIMIT_ALIASES,
    LIMIT_DEPTH,
    LIMIT_FILE_SIZE,
    LIMIT_NODES,
    R_NOT_REGULAR,
    R_SYMLINK,
    R_UNREADABLE,
    LoaderLimits,
    load_paths,
    load_text,
    spec_files,
)
from specs.validate import load_spec_set
from tests.conftest import RECONCILER
from tests.specs_factory import HOST, write

FAST_S = 1.0  # "well under a second" on two busy cores; typical is 0.2 s
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def alias_bomb(levels: int = 10, width: int = 10) -> str:
    text = 'a0: &a0 ["lol"]\n'
    for i in range(1, levels):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n"
    return text


HOSTILE = {
    "alias-bomb": (alias_bomb(), LIMIT_NODES),
    "many-aliases": ('a: &a x\nb: [' + ", ".join(["*a"] * 1500) + "]\n", LIMIT_ALIASES),
    "deep-brackets": ("a: " + "[" * 20000 + "]" * 20000 + "\n", LIMIT_DEPTH),
    "deep-braces": ("{a: " * 5000 + "1" + "}" * 5000 + "\n", LIMIT_DEPTH),
    "deep-block": ("".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v\n",
                   LIMIT_DEPTH),
    "self-alias": ("a: &x [*x]\n", LIMIT_DEPTH),
    "huge-int": ("a: " + "9" * 5000 + "\n", "yaml-syntax"),
    "bad-date": ("a: 2024-02-31\n", "yaml-syntax"),
    "nul-byte": ("a: b\x00c\n", "yaml-syntax"),
    "bool-tag": ("a: !!bool abc\n", "yaml-syntax"),
    "timestamp-tag": ("a: !!timestamp abc\n", "yaml-syntax"),
    "empty-int-tag": ("a: !!int ''\n", "yaml-syntax"),
    "many-documents": ("--- {a: 1}\n" * 30000, LIMIT_NODES),
    "python-tag": ("a: !!python/object/apply:os.system ['true']\n", "yaml-syntax"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_yaml_is_refused_fast_with_file_line_and_rule(name: str, yaml_loader: str
                                                             ) -> None:
    text, rule = HOSTILE[name]
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_text(text, "specs/hostile.yaml")
    elapsed = time.monotonic() - started
    [issue] = info.value.issues
    assert issue.rule == rule, str(issue)
    assert str(issue).startswith("specs/hostile.yaml:")
    assert issue.location.line >= 1
    if yaml_loader == "libyaml":  # the fallback refuses alike, at pure-Python speed
        assert elapsed < FAST_S, f"{name} took {elapsed:.2f}s"


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# " + b"x" * (2 * 1024 * 1024) + b"\n")
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_paths([tmp_path])
    assert time.monotonic() - started < FAST_S
    [issue] = info.value.issues
    assert issue.rule == LIMIT_FILE_SIZE
    assert str(issue).startswith(f"{big}:1:1:")
    # The limit is configurable: the same file passes a larger one (it is only a comment).
    assert load_paths([tmp_path], limits=LoaderLimits(max_file_bytes=3 * 1024 * 1024)) == []


def test_the_size_limit_comes_from_the_environment_and_bad_values_are_refused() -> None:
    assert LoaderLimits.from_env({"RECONCILER_MAX_SPEC_BYTES": "2048"}).max_file_bytes == 2048
    assert LoaderLimits.from_env({}).max_file_bytes == 1024 * 1024
    with pytest.raises(SpecError, match="positive number of bytes"):
        LoaderLimits.from_env({"RECONCILER_MAX_SPEC_BYTES": "lots"})


def test_invalid_utf8_is_located(tmp_path: Path) -> None:
    (tmp_path / "latin1.yaml").write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(SpecError) as info:
        load_paths([tmp_path])
    [issue] = info.value.issues
    assert (issue.location.line, issue.location.col, issue.rule) == (2, 7, "encoding")


def test_a_fifo_named_like_a_spec_is_refused_without_blocking(tmp_path: Path) -> None:
    write(tmp_path, name="a.yaml")
    os.mkfifo(tmp_path / "pipe.yaml")  # nobody writes: reading it would block forever
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_spec_set([tmp_path])
    assert time.monotonic() - started < FAST_S
    assert [(i.rule, Path(i.location.file).name) for i in info.value.issues] == [
        (R_NOT_REGULAR, "pipe.yaml")]


def test_symlinks_that_leave_the_folder_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(json.dumps(HOST))
    folder = tmp_path / "specs"
    write(folder, name="a.yaml", host=False)
    (folder / "a.yaml").write_text("")
    (folder / "leak.yaml").symlink_to(outside)
    (folder / "sub").symlink_to(tmp_path)
    (folder / "dangling.yaml").symlink_to(tmp_path / "missing.yaml")
    with pytest.raises(SpecError) as info:
        spec_files([folder])
    found = {(Path(i.location.file).name, i.rule) for i in info.value.issues}
    assert found == {("leak.yaml", R_SYMLINK), ("sub", R_SYMLINK),
                     ("dangling.yaml", R_UNREADABLE)}, info.value.issues
    assert str(outside) in str(info.value)


def test_a_symlink_inside_the_folder_and_editor_temporaries(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    real = write(folder / "real", name="host.yaml")
    (folder / "link.yaml").symlink_to(real)
    (folder / ".#host.yaml").symlink_to("user@box.1234")  # an emacs lock: dangling on purpose
    (folder / "host.yaml.swp").write_text("\x00binary")
    (folder / ".git").mkdir()
    (folder / ".git" / "x.yaml").write_text(": not yaml")
    assert spec_files([folder]) == [folder / "link.yaml", real]


def _run_without_dac(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NO_DAC, sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path.cwd())})


def test_an_unreadable_folder_or_file_refuses_the_whole_set(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    write(folder, name="host.yaml")
    hidden = folder / "team-b"
    write(hidden, name="more.yaml", host=False)
    hidden.chmod(0)
    locked = folder / "locked.yaml"
    locked.write_text("")
    locked.chmod(0)
    try:
        done = _run_without_dac(
            "import sys\nfrom specs.errors import SpecError\nfrom specs.loader import load_paths"
            f"\ntry:\n    load_paths([__import__('pathlib').Path({str(folder)!r})])\n"
            "except SpecError as exc:\n    print(exc)\n    sys.exit(7)\n")
    finally:
        hidden.chmod(0o755)
        locked.chmod(0o644)
    assert done.returncode == 7, done.stderr
    assert f"{hidden}: cannot read folder: Permission denied (unreadable)" in done.stdout
    assert f"{locked}: cannot read: Permission denied (unreadable)" in done.stdout


def test_validate_refuses_hostile_files_without_a_traceback(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    write(folder, name="host.yaml")
    (folder / "bomb.yaml").write_text(alias_bomb())
    (folder / "deep.yaml").write_text("a: " + "[" * 20000 + "]" * 20000 + "\n")
    (folder / "big.yaml").write_bytes(b"#" * (2 * 1024 * 1024))
    started = time.monotonic()
    done = subprocess.run([RECONCILER, "validate", str(folder)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    for name, rule in (("bomb", LIMIT_NODES), ("deep", LIMIT_DEPTH), ("big", LIMIT_FILE_SIZE)):
        assert any(line.startswith(f"{folder / name}.yaml:") and f"({rule})" in line
                   for line in done.stderr.splitlines()), done.stderr
    assert "3 errors; nothing was changed." in done.stderr
    assert time.monotonic() - started < 10  # a subprocess with imports, not the 46 s of before


@pytest.mark.parametrize("text", [
    "a: [" + "1," * 500_000 + "1]\n",   # a flow list of half a million values
    "- x\n" * 250_000,                  # a block list of a quarter million
], ids=["flow", "block"])
def test_a_file_of_very_many_values_is_refused_before_it_is_composed(text: str) -> None:
    """libyaml composes a whole file before our builder counts anything: a 1 MB file of
    500,000 values took 150 MB that way. Such a file is composed by the composer that counts
    as it goes, and refused at the 20,001st value in small memory."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as info:
            load_text(text, "x.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [i.rule for i in info.value.issues] == [LIMIT_NODES]
    assert peak < 30_000_000, peak
