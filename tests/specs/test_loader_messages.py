"""Every refusal of the spec loader, as a whole issue: file, line, column, field, message, rule.

A person fixes a spec from the one line we print, so each case asserts the entire ``SpecIssue``
(``test_loader_limits.py`` checks that hostile input is refused fast; ``test_loader_pieces.py``
the small helpers). Where libyaml and PyYAML's pure-Python parser word a problem differently,
both wordings are given. Cases that root cannot bypass stand in for "Permission denied": a path
longer than the system allows, and ``/proc`` files that fail or answer in pieces when read.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from specs.errors import Location, SpecError, SpecIssue
from specs.loader import (
    DEFAULT_LIMITS,
    ENV_MAX_FILE_BYTES,
    LIMIT_ALIASES,
    LIMIT_DEPTH,
    LIMIT_FILE_SIZE,
    LIMIT_NODES,
    R_ENCODING,
    R_INPUT,
    R_NOT_REGULAR,
    R_NUMBER_FORM,
    R_SYNTAX,
    R_UNREADABLE,
    LoaderLimits,
    _position,
    decode_spec,
    load_paths,
    load_text,
    read_spec_bytes,
    spec_files,
)

FILE = "specs/x.yaml"
DUPLICATE = "yaml-duplicate-key"
MIB = 1 << 20


def _issues(text: str, limits: LoaderLimits = DEFAULT_LIMITS) -> list[SpecIssue]:
    with pytest.raises(SpecError) as caught:
        load_text(text, FILE, limits)
    return caught.value.issues


def _at(line: int, col: int, field: str, message: str, rule: str) -> SpecIssue:
    return SpecIssue(Location(FILE, line, col), field, message, rule)


def _too_big(file: str, size: int, limit: int) -> SpecIssue:
    return SpecIssue(Location(file, 1, 1), "-", f"file is {size} bytes, more than the limit of "
                     f"{limit} bytes (set {ENV_MAX_FILE_BYTES} to change it)", LIMIT_FILE_SIZE)


def _whole(path: Path, message: str, rule: str) -> SpecIssue:
    """A refusal of a whole file or folder: no line to point at."""
    return SpecIssue(Location(str(path), 0, 0), "-", message, rule)


# --- the size limit on text ---------------------------------------------------------------------

def test_text_of_exactly_the_limit_loads_and_one_byte_more_is_refused_in_bytes() -> None:
    text = "a: " + "x" * 96 + "\n"  # 100 bytes
    assert load_text(text, FILE, LoaderLimits(max_file_bytes=100))[0].data == {"a": "x" * 96}
    assert _issues(text, LoaderLimits(max_file_bytes=99)) == [_too_big(FILE, 100, 99)]
    # Counted in UTF-8 bytes, not characters: five characters, six bytes.
    assert _issues("a: é\n", LoaderLimits(max_file_bytes=5)) == [_too_big(FILE, 6, 5)]


# --- documents ----------------------------------------------------------------------------------

def test_each_document_keeps_its_index_in_the_file_counting_empty_ones(yaml_loader: str) -> None:
    text = "a: 1\n--- \n---\nb: 2\n---\n...\n---\nc: 3\n"  # documents 1 and 3 are empty
    docs = load_text(text, FILE)
    assert [(d.file, d.index, d.data) for d in docs] == [
        (FILE, 0, {"a": 1}), (FILE, 2, {"b": 2}), (FILE, 4, {"c": 3})]
    assert load_text("---\n---\n", FILE) == []


# --- the composer's limits: the whole issue -----------------------------------------------------

@pytest.mark.parametrize(("text", "limits", "issue"), [
    ("a: &x 1\nb: [*x, *x]\n", LoaderLimits(max_aliases=1),
     _at(2, 9, "-", "more than 1 alias references in one document", LIMIT_ALIASES)),
    ("a: 1\nb: 2\n", LoaderLimits(max_nodes=4),
     _at(2, 4, "-", "more than 4 values in one file", LIMIT_NODES)),
    ("a:\n  b:\n    c: 1\n", LoaderLimits(max_depth=3),
     _at(3, 5, "-", "nested deeper than 3 levels", LIMIT_DEPTH)),
], ids=["aliases", "nodes", "depth"])
def test_a_limit_is_refused_for_the_document_as_a_whole(
        text: str, limits: LoaderLimits, issue: SpecIssue, yaml_loader: str) -> None:
    assert _issues(text, limits) == [issue]


def test_values_expanded_through_an_alias_count_against_the_budget(yaml_loader: str) -> None:
    # Composed: the mapping, 2 keys, the list and its 3 items, the alias: 8 nodes. Built: the
    # mapping and the list with its items twice, once through the alias: 9 values.
    text = "a: &x [1, 2, 3]\nb: *x\n"
    assert load_text(text, FILE, LoaderLimits(max_nodes=9))[0].data == {
        "a": [1, 2, 3], "b": [1, 2, 3]}
    assert _issues(text, LoaderLimits(max_nodes=8)) == [_at(
        1, 14, "-", "expands to more than 8 values (aliases count each time they are used)",
        LIMIT_NODES)]


def test_nesting_reached_through_an_alias_is_limited_where_the_value_was_written(
        yaml_loader: str) -> None:
    # Composed, neither branch is deeper than 4; built, b's copy of a sits two levels lower:
    # b > list > list (a) > list > 1 is five levels below the document.
    text = "a: &a [[1]]\nb: [[*a]]\n"
    assert load_text(text, FILE, LoaderLimits(max_depth=5))[0].data == {
        "a": [[1]], "b": [[[[1]]]]}
    assert _issues(text, LoaderLimits(max_depth=4)) == [_at(
        1, 9, "-", "nested deeper than 4 levels (through aliases)", LIMIT_DEPTH)]


def test_a_flow_nest_libyaml_refuses_itself_is_named_as_our_depth_limit(yaml_loader: str) -> None:
    """libyaml stops a flow nest at 1,000 levels while reading ahead, before our composer sees
    the 65th; the refusal names our limit either way, at the bracket where each stopped."""
    text = "a: " + "[" * 1001 + "]" * 1001 + "\n"
    col = 1003 if yaml_loader == "libyaml" else 67
    assert _issues(text) == [_at(1, col, "-", "nested deeper than 64 levels", LIMIT_DEPTH)]


# --- malformed YAML -----------------------------------------------------------------------------

SYNTAX = [  # text, where, {loader: message}: at the problem, not where its context began
    ("a: [1, 2\n", (2, 1), {"libyaml": "did not find expected ',' or ']'",
                            "python": "expected ',' or ']', but got '<stream end>'"}),
    ("a: b: c\n", (1, 5), {"libyaml": "mapping values are not allowed in this context",
                           "python": "mapping values are not allowed here"}),
    ("a: &x 1\nb: &x 2\n", (2, 4), {"libyaml": "second occurrence",
                                    "python": "second occurrence"}),
    ("a: 1\n---\n- *x\n", (3, 3), {"libyaml": "found undefined alias 'x'",
                                   "python": "found undefined alias 'x'"}),
    ("\t a: 1\n", (1, 1), {"libyaml": "found character that cannot start any token",
                           "python": "found character '\\t' that cannot start any token"}),
]


@pytest.mark.parametrize(("text", "where", "said"), SYNTAX,
                         ids=["unclosed-list", "nested-mapping", "duplicate-anchor",
                              "undefined-alias", "tab"])
def test_malformed_yaml_is_refused_at_the_problem(text: str, where: tuple[int, int],
                                                  said: dict[str, str], yaml_loader: str) -> None:
    assert _issues(text) == [_at(*where, "-", said[yaml_loader], R_SYNTAX)]


@pytest.mark.parametrize(("text", "where", "code"), [
    ("a: b\x01c\n", (1, 5), "0001"),
    ("a: 1\nb: 2\nc: x\x07\n", (3, 5), "0007"),
    ("\x7f", (1, 1), "007f"),
], ids=["line-1", "line-3", "first-character"])
def test_an_unacceptable_character_is_refused_at_its_line_and_column(
        text: str, where: tuple[int, int], code: str, yaml_loader: str) -> None:
    reason = {"libyaml": "control characters are not allowed",
              "python": "special characters are not allowed"}[yaml_loader]
    assert _issues(text) == [_at(*where, "-", f"unacceptable character #x{code}: {reason}",
                                 R_SYNTAX)]


# --- tags, keys and values ----------------------------------------------------------------------

BUILT = [  # text, issue: the field is the path of the mapping or value at fault
    ("a: !custom {b: 1}\n", _at(1, 4, "a", "YAML tag '!custom' is not allowed", R_SYNTAX)),
    ("a:\n  b: !!set {x: 1}\n",
     _at(2, 6, "a.b", "YAML tag 'tag:yaml.org,2002:set' is not allowed", R_SYNTAX)),
    ("--- !custom\na: 1\n", _at(1, 5, "-", "YAML tag '!custom' is not allowed", R_SYNTAX)),
    ("a:\n  ? [1]\n  : x\n", _at(2, 5, "a", "mapping keys must be scalars", R_SYNTAX)),
    ("a:\n  ~: 1\n", _at(2, 3, "a", "mapping keys must be scalars", R_SYNTAX)),
    ("? {b: 1}\n: x\n", _at(1, 3, "-", "mapping keys must be scalars", R_SYNTAX)),
    ("a:\n  b: 1\n  b: 2\n", _at(3, 3, "a.b", "duplicate key", DUPLICATE)),
    ("{a: 1, a: 2}\n", _at(1, 8, "a", "duplicate key", DUPLICATE)),
    ("a:\n  1: x\n  1: y\n", _at(3, 3, "a.1", "duplicate key", DUPLICATE)),
    ("a:\n  b: !!int x\n", _at(2, 6, "a.b", "cannot read this value: invalid literal for int() "
                               "with base 10: 'x'", R_SYNTAX)),
    ("a:\n  !!int x: 1\n", _at(2, 3, "a", "cannot read this value: invalid literal for int() "
                               "with base 10: 'x'", R_SYNTAX)),
]


@pytest.mark.parametrize(("text", "issue"), BUILT,
                         ids=["tag", "nested-tag", "document-tag", "list-key", "null-key",
                              "mapping-key-at-top", "duplicate", "duplicate-flow",
                              "duplicate-number", "bad-value", "bad-key"])
def test_a_value_that_cannot_be_built_is_refused_at_its_field(text: str, issue: SpecIssue,
                                                              yaml_loader: str) -> None:
    assert _issues(text) == [issue]


# --- bytes that are not UTF-8 -------------------------------------------------------------------

@pytest.mark.parametrize(("data", "where", "reason", "byte"), [
    (b"a: 1\nb: 2\nc: x\xff\nd: 4\ne: 5\n", (3, 5), "invalid start byte", "ff"),
    (b"\xffa: 1\n", (1, 1), "invalid start byte", "ff"),
    (b"\n\xe9\n", (2, 1), "invalid continuation byte", "e9"),
    (b"\n\na\xc3", (3, 2), "unexpected end of data", "c3"),
], ids=["line-3", "first-byte", "after-a-leading-newline", "at-the-end"])
def test_a_byte_that_is_not_utf8_is_refused_at_its_line_and_column(
        data: bytes, where: tuple[int, int], reason: str, byte: str) -> None:
    with pytest.raises(SpecError) as caught:
        decode_spec(data, FILE)
    assert caught.value.issues == [_at(*where, "-", f"not UTF-8: {reason} (byte 0x{byte})",
                                       R_ENCODING)]


@pytest.mark.parametrize(("index", "where"), [(0, (1, 1)), (1, (2, 1)), (2, (2, 2)),
                                              (3, (2, 3)), (4, (3, 1))])
def test_positions_in_a_text_that_starts_with_a_newline(index: int,
                                                       where: tuple[int, int]) -> None:
    assert _position("\nab\nc", index) == where


# --- reading a spec file ------------------------------------------------------------------------

def _read_refused(path: Path, limits: LoaderLimits = DEFAULT_LIMITS,
                  shown: str | None = None) -> list[SpecIssue]:
    with pytest.raises(SpecError) as caught:
        read_spec_bytes(path, limits, shown)
    return caught.value.issues


def test_a_file_read_in_several_pieces_comes_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    data = bytes(range(256)) * (6 * 1024)  # 1.5 MiB: more than one read
    path.write_bytes(data)
    assert read_spec_bytes(path, LoaderLimits(max_file_bytes=2 * MIB)) == data
    assert read_spec_bytes(path, LoaderLimits(max_file_bytes=len(data))) == data
    assert _read_refused(path, LoaderLimits(max_file_bytes=len(data) - 1)) == [
        _too_big(str(path), len(data), len(data) - 1)]


KALLSYMS = Path("/proc/kallsyms")  # several MiB, sized 0, answered at most a page per read


def _kallsyms_over(size: int) -> None:
    if not os.access(KALLSYMS, os.R_OK):
        pytest.skip("no readable /proc/kallsyms")
    with KALLSYMS.open("rb") as stream:
        if len(stream.read(size + 1)) <= size:
            pytest.skip(f"/proc/kallsyms is not longer than {size} bytes here")


def test_a_file_that_says_it_is_empty_is_limited_over_many_reads() -> None:
    """A /proc file reports size 0 and answers a page at a time: the limit is applied to the
    sum of the reads, which stops one byte past the limit."""
    limit = 3 * MIB // 2
    _kallsyms_over(limit)
    assert _read_refused(KALLSYMS, LoaderLimits(max_file_bytes=limit), "specs/k.yaml") == [
        _too_big("specs/k.yaml", limit + 1, limit)]


def test_a_read_that_ends_exactly_at_the_limit_is_not_taken_for_the_end_of_the_file() -> None:
    """The first read of /proc/kallsyms ends a little short of a page, with more to come; with
    the limit there, one more byte is read to tell a file of exactly the limit from a longer
    one."""
    _kallsyms_over(MIB)
    fd = os.open(KALLSYMS, os.O_RDONLY)
    try:
        first = len(os.read(fd, MIB))
    finally:
        os.close(fd)
    assert _read_refused(KALLSYMS, LoaderLimits(max_file_bytes=first)) == [
        _too_big(str(KALLSYMS), first + 1, first)]


def test_a_file_that_fails_to_be_read_is_unreadable_naming_it() -> None:
    """/proc/self/mem is a regular file that opens, but reading at offset 0 (never mapped)
    fails."""
    mem = Path("/proc/self/mem")
    assert _read_refused(mem) == [_whole(mem, "cannot read: Input/output error", R_UNREADABLE)]
    assert _read_refused(mem, shown="specs/mem.yaml") == [SpecIssue(
        Location("specs/mem.yaml", 0, 0), "-", "cannot read: Input/output error",
        R_UNREADABLE)]


def test_files_are_named_relative_to_the_root_in_every_refusal(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "big.yaml").write_bytes(b"#" * 101)
    (folder / "latin1.yaml").write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(SpecError) as caught:
        load_paths([folder], relative_to=tmp_path, limits=LoaderLimits(max_file_bytes=100))
    assert caught.value.issues == [
        SpecIssue(Location("specs/latin1.yaml", 2, 7), "-",
                  "not UTF-8: invalid continuation byte (byte 0xe9)", R_ENCODING),
        _too_big("specs/sub/big.yaml", 101, 100)]


# --- listing spec files -------------------------------------------------------------------------

def test_a_file_named_explicitly_is_taken_whatever_its_name(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("a: 1\n")
    assert spec_files([notes]) == [notes]
    assert [(d.file, d.data) for d in load_paths([notes])] == [(str(notes), {"a": 1})]


def test_paths_that_are_missing_or_cannot_be_inspected_are_all_named(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    too_long = tmp_path / ("x" * 300)  # longer than a file name may be: even root is refused
    with pytest.raises(SpecError) as caught:
        spec_files([missing, too_long, tmp_path])
    assert caught.value.issues == [
        _whole(missing, "no such file or folder", R_INPUT),
        _whole(too_long, "cannot inspect: File name too long", R_UNREADABLE)]


def _deep_chain(top: Path, name: str, levels: int) -> list[Path]:
    """``levels`` nested folders under ``top``, made relative to open folders: their full
    paths grow past what the system accepts in one path."""
    chain = [top]
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
            chain.append(chain[-1] / name)
    finally:
        os.close(fd)
    return chain


def test_a_folder_that_cannot_be_listed_is_named_and_the_rest_still_read(
        tmp_path: Path) -> None:
    """A folder whose path is too long cannot be listed, even by root; the folders after it
    are still read, so every problem of the set is reported at once."""
    folder = tmp_path / "specs"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "bad.yaml").write_text("a: *nope\n")
    (folder / "z").mkdir()
    try:
        chain = _deep_chain(folder / "z", "d" * 250, 20)
        limit = os.pathconf(folder, "PC_PATH_MAX")
        unlisted = next(p for p in chain if len(os.fsencode(p)) >= limit)
        with pytest.raises(SpecError) as caught:
            load_paths([folder])
        assert caught.value.issues == [
            _whole(unlisted, "cannot read folder: File name too long", R_UNREADABLE),
            SpecIssue(Location(str(folder / "a" / "bad.yaml"), 1, 4), "-",
                      "found undefined alias 'nope'", R_SYNTAX)]
    finally:
        shutil.rmtree(folder / "z")  # by open folders too: the paths are too long to name


def test_a_fifo_in_a_folder_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("a: 1\n")
    os.mkfifo(tmp_path / "pipe.yaml")
    with pytest.raises(SpecError) as caught:
        spec_files([tmp_path])
    assert caught.value.issues == [_whole(tmp_path / "pipe.yaml", "not a regular file",
                                          R_NOT_REGULAR)]


@pytest.mark.parametrize(("text", "where"), [
    ("é: b\x01c\n", (1, 5)),  # after a two-byte character: libyaml counts bytes, we do not
    ("ééééé\n\x01\na\nb\nc\n", (2, 1)),
    ("a: 😀\x02\n", (1, 5)),  # after a four-byte character
])
def test_a_control_character_after_non_ascii_text_is_placed_by_character(
        text: str, where: tuple[int, int], yaml_loader: str) -> None:
    with pytest.raises(SpecError) as info:
        load_text(text, "f.yaml")
    [issue] = info.value.issues
    assert (issue.location.line, issue.location.col) == where, (yaml_loader, issue)
    assert issue.message.startswith("unacceptable character #x000")


def test_a_lone_surrogate_is_refused_at_its_place_never_raised(yaml_loader: str) -> None:
    with pytest.raises(SpecError) as info:
        load_text("a: b\n\u00e9\udc80: c\n", "f.yaml")
    [issue] = info.value.issues
    assert (issue.location, issue.field, issue.rule) == (Location("f.yaml", 2, 2), "-", R_SYNTAX)
    assert "U+DC80" in issue.message or "#xdc80" in issue.message  # each loader's words


@pytest.mark.parametrize("written", ["5:00:00", "017", "0x1F", "1_000", "1:30.5"])
def test_a_number_in_another_base_or_form_is_refused_not_reread(written: str,
                                                                 yaml_loader: str) -> None:
    """YAML 1.1 reads ``5:00:00`` as 18000 and ``017`` as 15: a port or GPU index would
    silently become another number. Only plain decimal is read as a number."""
    [issue] = _issues(f"a:\n  port: {written}\n")
    assert (issue.location.line, issue.location.col, issue.field) == (2, 9, "a.port")
    assert issue.rule == R_NUMBER_FORM
    assert "plain decimal" in issue.message
    [doc] = load_text(f"a:\n  port: '{written}'\n  n: 18000\n  x: -2.5\n  z: 0\n", FILE,
                      DEFAULT_LIMITS)
    assert doc.data == {"a": {"port": written, "n": 18000, "x": -2.5, "z": 0}}
