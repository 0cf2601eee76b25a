"""The spec loader's small pieces, each exactly: where an error is placed (line and column),
how a field path is written, how a spec file is read (and refused), how symlinks in a spec
folder are judged, and where the file-size limit comes from. Whole-file behaviour is in
``test_loader_limits.py``, ``test_hostile_yaml.py`` and ``test_bad_input.py``."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import yaml

from specs.errors import Location, SpecError, SpecIssue
from specs.loader import (
    DEFAULT_LIMITS,
    ENV_MAX_FILE_BYTES,
    LIMIT_ALIASES,
    LIMIT_DEPTH,
    LIMIT_FILE_SIZE,
    LIMIT_NODES,
    R_INPUT,
    R_NOT_REGULAR,
    R_SYMLINK,
    R_UNREADABLE,
    Document,
    LoaderLimits,
    _dotted,
    _position,
    load_text,
    read_spec_bytes,
    spec_files,
)
from tests.specs_factory import HOST

# --- positions and paths ------------------------------------------------------------------------

@pytest.mark.parametrize(("index", "where"), [
    (0, (1, 1)), (1, (1, 2)), (2, (1, 3)),  # "ab\n": the newline is line 1, column 3
    (3, (2, 1)), (4, (2, 2)), (6, (3, 1)), (7, (3, 2)), (8, (3, 3)),
    (-5, (1, 1)), (99, (3, 3)),  # clamped to the text
])
def test_a_character_index_is_a_one_based_line_and_column(index: int,
                                                          where: tuple[int, int]) -> None:
    assert _position("ab\ncd\nef", index) == where


def test_positions_past_the_first_line_count_only_the_lines_before() -> None:
    text = "a\n\nbc\nd"
    assert [_position(text, i) for i in range(len(text) + 1)] == [
        (1, 1), (1, 2), (2, 1), (3, 1), (3, 2), (3, 3), (4, 1), (4, 2)]


def test_a_field_path_is_dotted_and_the_document_is_a_dash() -> None:
    assert _dotted(("spec", "secrets", 0, "name")) == "spec.secrets.0.name"
    assert _dotted(("spec",)) == "spec"
    assert _dotted(()) == "-"


def test_a_field_is_located_at_its_deepest_known_prefix() -> None:
    doc = Document("x.yaml", 0, {}, {(): (1, 1), ("spec",): (5, 3), ("spec", "env"): (9, 5)})
    assert doc.locate(("spec", "env", "A")) == Location("x.yaml", 9, 5)
    assert doc.locate(("spec", "model")) == Location("x.yaml", 5, 3)
    assert doc.locate(("metadata",)) == Location("x.yaml", 1, 1)
    assert Document("y.yaml", 0, {}).locate(("spec",)) == Location("y.yaml", 1, 1)


# --- reading a spec file ------------------------------------------------------------------------

def _refused(path: Path, limits: LoaderLimits = DEFAULT_LIMITS,
             shown: str | None = None) -> SpecIssue:
    with pytest.raises(SpecError) as caught:
        read_spec_bytes(path, limits, shown)
    assert len(caught.value.issues) == 1
    return caught.value.issues[0]


def test_a_missing_file_is_unreadable_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "gone.yaml"
    assert _refused(path) == SpecIssue(Location(str(path), 0, 0), "-",
                                       "cannot read: No such file or directory", R_UNREADABLE)
    assert _refused(path, shown="specs/gone.yaml").location.file == "specs/gone.yaml"


def test_a_folder_or_a_fifo_is_not_a_regular_file_and_a_fifo_never_blocks(
        tmp_path: Path) -> None:
    assert _refused(tmp_path) == SpecIssue(Location(str(tmp_path), 0, 0), "-",
                                           "not a regular file", R_NOT_REGULAR)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    done: list[SpecIssue] = []
    reader = threading.Thread(target=lambda: done.append(_refused(fifo)), daemon=True)
    reader.start()
    reader.join(10)  # opened without blocking: no writer is ever needed
    assert done == [SpecIssue(Location(str(fifo), 0, 0), "-", "not a regular file",
                              R_NOT_REGULAR)]


def test_a_spec_file_replaced_by_a_folder_of_its_name_holds_the_folder(tmp_path: Path) -> None:
    """Issue 26: streams.yaml turned into a folder for 25 s once deleted its StreamSet (the
    folder was walked and held nothing). It refuses the load instead, naming the folder."""
    (tmp_path / "host.yaml").write_text(yaml.safe_dump(HOST))
    (tmp_path / "streams.yaml").mkdir()
    (tmp_path / "streams.yaml" / "inner.yaml").write_text(yaml.safe_dump(HOST))
    (tmp_path / "plain-folder").mkdir()  # any other folder is walked as before
    with pytest.raises(SpecError) as info:
        spec_files([tmp_path])
    assert info.value.issues == [SpecIssue(
        Location(str(tmp_path / "streams.yaml"), 0, 0), "-", "a folder named like a spec "
        "file: refused until it is a file again (its resources are kept meanwhile)",
        R_NOT_REGULAR)]


def test_the_size_limit_is_inclusive_and_named_with_its_variable(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"x" * 100)
    assert read_spec_bytes(path, LoaderLimits(max_file_bytes=100)) == b"x" * 100
    assert _refused(path, LoaderLimits(max_file_bytes=99)) == SpecIssue(
        Location(str(path), 1, 1), "-", f"file is 100 bytes, more than the limit of 99 bytes "
        f"(set {ENV_MAX_FILE_BYTES} to change it)", LIMIT_FILE_SIZE)


def test_a_file_whose_size_says_nothing_is_limited_while_read() -> None:
    """/proc files report size 0: the limit is applied to what is read."""
    path = Path("/proc/self/status")
    issue = _refused(path, LoaderLimits(max_file_bytes=10))
    assert issue.message == (f"file is 11 bytes, more than the limit of 10 bytes (set "
                             f"{ENV_MAX_FILE_BYTES} to change it)")
    assert len(read_spec_bytes(path, LoaderLimits(max_file_bytes=1 << 20))) > 11


# --- the size limit from the environment --------------------------------------------------------

def test_the_file_size_limit_comes_from_its_variable() -> None:
    assert LoaderLimits.from_env({}) == LoaderLimits()
    assert LoaderLimits.from_env({ENV_MAX_FILE_BYTES: "  "}) == LoaderLimits()
    assert LoaderLimits.from_env({ENV_MAX_FILE_BYTES: " 2048 "}) == LoaderLimits(
        max_file_bytes=2048)
    assert LoaderLimits.from_env({ENV_MAX_FILE_BYTES: "1"}).max_file_bytes == 1


@pytest.mark.parametrize("raw", ["0", "-5", "1e6", "lots", "12 KiB"])
def test_a_bad_file_size_limit_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(SpecError) as caught:
        LoaderLimits.from_env({ENV_MAX_FILE_BYTES: raw})
    assert caught.value.issues == [SpecIssue(
        Location(ENV_MAX_FILE_BYTES, 0, 0), "-",
        f"must be a positive number of bytes, got {raw.strip()!r}", R_INPUT)]


# --- symlinks in a spec folder ------------------------------------------------------------------

def test_symlinks_in_a_spec_folder_are_judged_one_by_one(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    (folder / "sub").mkdir(parents=True)
    outside = tmp_path / "secret.yaml"
    outside.write_text("x: 1\n")
    (folder / "a.yaml").write_text("kind: Host\n")
    (folder / "inside.yaml").symlink_to(folder / "a.yaml")
    (folder / "notes.txt").symlink_to(outside)  # not a spec file: ignored
    (folder / "escape.yaml").symlink_to(outside)
    (folder / "broken.yml").symlink_to(folder / "missing.yaml")
    (folder / "dirlink").symlink_to(folder / "sub")
    (folder / "fifo-link.yaml").symlink_to(folder / "sub" / "pipe")
    os.mkfifo(folder / "sub" / "pipe")
    with pytest.raises(SpecError) as caught:
        spec_files([folder])
    said = {Path(i.location.file).name: (i.message, i.rule) for i in caught.value.issues}
    real = folder.resolve()
    assert said == {
        "broken.yml": (said["broken.yml"][0], R_UNREADABLE),
        "dirlink": (f"symlinked folder (to {real / 'sub'}) is not followed; move the specs "
                    "into the folder or name the target folder itself", R_SYMLINK),
        "escape.yaml": (f"symlink points outside the folder {real} (to {outside.resolve()}); "
                        "refused so that a spec folder cannot read other files", R_SYMLINK),
        "fifo-link.yaml": ("symlink to something that is not a regular file", R_NOT_REGULAR),
    }
    assert said["broken.yml"][0].startswith("broken symlink: ")
    (folder / "escape.yaml").unlink()
    (folder / "broken.yml").unlink()
    (folder / "dirlink").unlink()
    (folder / "fifo-link.yaml").unlink()
    assert [p.name for p in spec_files([folder])] == ["a.yaml", "inside.yaml"]


# --- the composer's limits, at and just past each ---------------------------------------------

def _limit_issue(text: str, limits: LoaderLimits) -> SpecIssue:
    with pytest.raises(SpecError) as caught:
        load_text(text, "x.yaml", limits)
    assert len(caught.value.issues) == 1
    return caught.value.issues[0]


def test_aliases_up_to_the_limit_load_and_one_more_is_refused_where_it_is(
        yaml_loader: str) -> None:
    text = "a: &x 1\nb: [*x, *x]\n"
    assert load_text(text, "x.yaml", LoaderLimits(max_aliases=2))[0].data == {"a": 1,
                                                                            "b": [1, 1]}
    issue = _limit_issue(text, LoaderLimits(max_aliases=1))
    assert (issue.location, issue.message, issue.rule) == (
        Location("x.yaml", 2, 9), "more than 1 alias references in one document",
        LIMIT_ALIASES)
    # The count is per document: two documents of two aliases each pass a limit of two.
    assert len(load_text(text + "---\n" + text, "x.yaml", LoaderLimits(max_aliases=2))) == 2


def test_values_up_to_the_limit_load_and_one_more_is_refused_where_it_is(
        yaml_loader: str) -> None:
    text = "a: 1\nb: 2\n"  # the mapping, two keys, two values: 5 nodes
    assert load_text(text, "x.yaml", LoaderLimits(max_nodes=5))[0].data == {"a": 1, "b": 2}
    issue = _limit_issue(text, LoaderLimits(max_nodes=4))
    assert (issue.location, issue.message, issue.rule) == (
        Location("x.yaml", 2, 4), "more than 4 values in one file", LIMIT_NODES)


def test_nesting_up_to_the_limit_loads_and_one_level_more_is_refused_where_it_is(
        yaml_loader: str) -> None:
    text = "a:\n  b:\n    c: 1\n"  # mapping > mapping > mapping > key and value: 4 levels
    assert load_text(text, "x.yaml", LoaderLimits(max_depth=4))[0].data == {
        "a": {"b": {"c": 1}}}
    issue = _limit_issue(text, LoaderLimits(max_depth=3))
    assert (issue.location, issue.message, issue.rule) == (
        Location("x.yaml", 3, 5), "nested deeper than 3 levels", LIMIT_DEPTH)
