"""Which saves skip the folder's quiet period: only files renamed over the ones last read.

Real files, real inotify (watchfiles): each test saves the way a tool does and asserts how the
revision was trusted (``FolderSource.settled_by``), never how long it took.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import watchfiles

from reconciler.sources import FolderSource, SourceError
from reconciler.sources.saves import FileSig, ReplacedFiles, signature
from tests.reconciler.test_sources import OTHER_HOST, SPECS, Watching, names, watching

QUIET_S = 0.2
RENAME = "rename"
QUIET = "quiet period"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "specs"
    root.mkdir()
    (root / "vlm.yaml").write_text(SPECS)
    (root / "other.yaml").write_text(OTHER_HOST)
    return root


@pytest.fixture
def watched(folder: Path) -> Iterator[tuple[FolderSource, Watching]]:
    source = FolderSource(folder, quiet_s=QUIET_S)
    source.load()
    with watching(source) as w:
        assert source.armed.wait(5), "the watcher never armed"
        yield source, w


def sig(path: Path) -> FileSig:
    found = signature(path)
    assert found is not None
    return found


def safe_write(path: Path, text: str) -> None:
    """What sed -i, Ansible and JetBrains' safe write do: a whole temp file, renamed over."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.rename(path)


def noticed(w: Watching, path: Path, text: str) -> None:
    """A safe write, and the watcher's call that follows it (so it has recorded the save)."""
    w.calls.clear()
    safe_write(path, text)
    w.seconds_until_call_after(0.0)


def test_a_file_renamed_over_a_spec_is_trusted_without_the_quiet_period(
        folder: Path, watched: tuple[FolderSource, Watching]) -> None:
    source, w = watched
    # On a loaded machine inotify may deliver a rename as an unlink and a create in separate
    # batches; the source then rightly falls back to the quiet period. A rename must be
    # trusted at least once in a few saves (each one read correctly whatever way it settled).
    ways = []
    for port in (18002, 18003, 18005):
        noticed(w, folder / "vlm.yaml", SPECS.replace("18000", str(port)))
        assert source.load().spec_set.deployments[0].spec.port.host == port
        ways.append(source.settled_by)
        if ways[-1] == RENAME and len(ways) >= 2:
            break  # trusted again: the renamed file is now the one last read
    assert RENAME in ways, ways


@pytest.mark.parametrize("save", ["in place", "unlink and create", "new file"])
def test_other_saves_wait_the_quiet_period(
        folder: Path, watched: tuple[FolderSource, Watching], save: str) -> None:
    source, w = watched
    w.calls.clear()
    spec = folder / "vlm.yaml"
    new = SPECS.replace("18000", "18004")
    if save == "in place":  # an editor that truncates, then writes
        spec.write_text(new)
    elif save == "unlink and create":  # vim's backup dance, git checkout
        spec.unlink()
        spec.write_text(new)
    else:
        (folder / "more.yaml").write_text(OTHER_HOST.replace("other", "more"))
    w.seconds_until_call_after(0.0)
    source.load()
    assert source.settled_by == QUIET


def test_a_rename_after_an_unnoticed_unlink_is_not_trusted(tmp_path: Path) -> None:
    """inotify may split unlink and create over two batches: a path deleted since the last
    snapshot stays untrusted until a snapshot has read it again."""
    spec = tmp_path / "a.yaml"
    spec.write_text("one")
    before = {"a.yaml": sig(spec)}
    replaced = ReplacedFiles(tmp_path)
    mark = replaced.mark()
    spec.unlink()
    replaced.observe([(watchfiles.Change.deleted, str(spec))])
    spec.write_text("two")
    replaced.observe([(watchfiles.Change.added, str(spec))])
    now = {"a.yaml": sig(spec)}
    assert not replaced.explains(before, now)

    replaced.read(mark)  # a snapshot read before the unlink does not clear it
    assert not replaced.explains(before, now)
    replaced.read(replaced.mark())  # one read after it does
    safe_write(spec, "three")
    replaced.observe([(watchfiles.Change.added, str(spec))])
    assert replaced.explains(now, {"a.yaml": sig(spec)})


def test_a_write_after_the_rename_brings_the_quiet_period_back(tmp_path: Path) -> None:
    spec = tmp_path / "a.yaml"
    spec.write_text("one")
    before = {"a.yaml": sig(spec)}
    replaced = ReplacedFiles(tmp_path)
    safe_write(spec, "two")
    replaced.observe([(watchfiles.Change.added, str(spec))])
    assert replaced.explains(before, {"a.yaml": sig(spec)})
    with spec.open("a") as f:  # its event not seen yet: the signature alone tells
        f.write(" and more")
    assert not replaced.explains(before, {"a.yaml": sig(spec)})
    same = dict(before)
    assert replaced.explains(before, same)  # nothing changed
    assert not replaced.explains(before, {})  # a file went away


def test_a_rename_that_removes_a_resource_waits_the_quiet_period(
        folder: Path, watched: tuple[FolderSource, Watching]) -> None:
    """Half of a move between two files: the resource left one file and is not in the
    other yet. Whole files, but a doubtful whole."""
    source, w = watched
    noticed(w, folder / "other.yaml", "# moved to another file\n")
    assert names(source.load()) == ["Deployment/vlm", "Host/local"]
    assert source.settled_by == QUIET


def test_an_invalid_rename_waits_the_quiet_period_then_is_refused(
        folder: Path, watched: tuple[FolderSource, Watching]) -> None:
    source, w = watched
    noticed(w, folder / "vlm.yaml", SPECS.replace("host: local", "host: nowhere"))
    with pytest.raises(SourceError) as info:
        source.load()
    assert "nowhere" in str(info.value)
    assert str(folder / "vlm.yaml") in str(info.value)
    assert source.settled_by == QUIET


def test_an_emptied_file_is_held_until_written_again_or_deleted(folder: Path) -> None:
    """An editor that truncates and then stalls past the quiet period (a loaded machine) shows
    an empty file for as long as it likes: it never deletes what the file declared."""
    source = FolderSource(folder, quiet_s=0)
    everything = ["Deployment/vlm", "Host/local", "Host/other"]
    assert names(source.load()) == everything
    other = folder / "other.yaml"
    other.write_bytes(b"")
    with pytest.raises(SourceError) as info:
        source.load()
    assert [str(i) for i in info.value.issues] == [
        f"{other}: emptied (0 bytes) while it declared Host/other; held as a save caught "
        "between truncate and write, so nothing in it is deleted: write it again, or delete "
        "the file to delete them (emptied-file)"]
    assert info.value.revision is not None
    (folder / "vlm.yaml").write_text(SPECS.replace("18000", "18006"))  # still held meanwhile
    with pytest.raises(SourceError, match="emptied-file"):
        source.load()
    other.write_text(OTHER_HOST)
    assert names(source.load()) == everything
    other.unlink()  # the plain way to delete them
    assert names(source.load()) == ["Deployment/vlm", "Host/local"]


def test_empty_files_that_declared_nothing_are_not_held(folder: Path) -> None:
    source = FolderSource(folder, quiet_s=0)
    notes = folder / "notes.yaml"
    notes.write_text("# nothing declared here yet\n")
    (folder / "new.yaml").write_bytes(b"")  # created empty: it never declared anything
    source.load()
    notes.write_bytes(b"")
    assert names(source.load()) == ["Deployment/vlm", "Host/local", "Host/other"]
