"""Sources against real files, real inotify (watchfiles) and real Git repositories on disk.

Timing assertions are the product's promises (a save is noticed within a second, a poke within
two); everything else waits by polling with a deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import watchfiles

from reconciler.sources import (
    FolderSource,
    GitSource,
    Snapshot,
    Source,
    SourceError,
)
from reconciler.sources.git import KEEP_SNAPSHOTS, SNAPSHOTS_DIR
from state.redaction import redact_urls
from tests.e2e.daemon_helpers import wait_for
from tests.e2e.gitrepo_helpers import GitRepo

SPECS = """\
apiVersion: rtvi.reconciler/v1
kind: Host
metadata: {name: local}
---
apiVersion: rtvi.reconciler/v1
kind: Deployment
metadata: {name: vlm}
spec:
  host: local
  profile: exploration
  image: rtvi-emulator:dev
  model: {use: vllm-compatible, path: ngc:nim/nvidia/m:1}
  port: {host: 18000}
"""
BROKEN_LINE = len(SPECS.splitlines()) + 1
BROKEN = SPECS + "  bogus: 1\n"  # an unknown field, on line BROKEN_LINE, column 3
OTHER_HOST = "apiVersion: rtvi.reconciler/v1\nkind: Host\nmetadata: {name: other}\n"
SAVE_NOTICED_S = 1.0
POKE_NOTICED_S = 2.0
STOPPED_S = 1.0


def names(snapshot: Snapshot) -> list[str]:
    return sorted(f"{r.kind}/{r.metadata.name}" for r in snapshot.spec_set.resources)


class Watching:
    """A source's watch() running in its own thread, recording when changed() was called."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.stop = threading.Event()
        self.calls: list[float] = []
        self.thread = threading.Thread(target=source.watch, args=(self.stop, self._changed),
                                       daemon=True)

    def _changed(self) -> None:
        self.calls.append(time.monotonic())

    def seconds_until_call_after(self, since: float, timeout: float = 5.0) -> float:
        first = wait_for("changed() to be called",
                         lambda: next((t for t in self.calls if t >= since), None), timeout)
        return first - since

    def halt(self) -> float:
        started = time.monotonic()
        self.stop.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive(), "watch() did not return after stop was set"
        return time.monotonic() - started


@contextmanager
def watching(source: Source) -> Iterator[Watching]:
    w = Watching(source)
    w.thread.start()
    try:
        yield w
    finally:
        if w.thread.is_alive():
            w.halt()


# --- folder ------------------------------------------------------------------------------------

@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "specs"
    (root / "team").mkdir(parents=True)
    (root / "team" / "vlm.yaml").write_text(SPECS)
    return root


def test_folder_revision_changes_iff_content_changes(folder: Path) -> None:
    source = FolderSource(folder)
    first = source.load()
    assert first.revision.startswith("sha256:")
    assert len(first.revision) == 7 + 64
    assert names(first) == ["Deployment/vlm", "Host/local"]
    assert first.root == folder
    assert source.load().revision == first.revision

    spec = folder / "team" / "vlm.yaml"
    spec.write_text(SPECS)  # rewritten, same bytes (mtime changes)
    (folder / "README.md").write_text("not a spec")
    assert source.load().revision == first.revision

    spec.write_text(SPECS.replace("18000", "18001"))
    changed = source.load()
    assert changed.revision != first.revision
    assert changed.spec_set.deployments[0].spec.port.host == 18001

    spec.write_text(SPECS)
    assert source.load().revision == first.revision  # same content, same revision

    (folder / "team" / "other.yml").write_text(OTHER_HOST)
    added = source.load()
    assert added.revision != first.revision
    assert names(added) == ["Deployment/vlm", "Host/local", "Host/other"]

    (folder / "team" / "other.yml").rename(folder / "other.yml")  # same bytes, another path
    assert source.load().revision not in (first.revision, added.revision)


def test_an_unchanged_folder_is_not_parsed_again(folder: Path) -> None:
    """`reconciler sync` re-reads the source: the same bytes give the very same snapshot (no
    YAML parsed again); one changed byte gives a new one, and back gives the first content."""
    source = FolderSource(folder, quiet_s=0)
    first = source.load()
    assert source.load() is first
    spec = folder / "team" / "vlm.yaml"
    spec.write_text(SPECS.replace("18000", "18001"))
    changed = source.load()
    assert changed is not first
    assert changed.spec_set.deployments[0].spec.port.host == 18001
    assert source.load() is changed
    spec.write_text(SPECS)
    back = source.load()
    assert back.revision == first.revision
    assert back.spec_set.deployments[0].spec.port.host == (
        18000)


def test_folder_invalid_file_is_refused_naming_file_and_line(folder: Path) -> None:
    source = FolderSource(folder)
    good = source.load()
    bad = folder / "team" / "vlm.yaml"
    bad.write_text(BROKEN)
    with pytest.raises(SourceError) as info:
        source.load()
    assert str(info.value) == f"{bad}:{BROKEN_LINE}:3: spec.bogus: unknown field (schema)"
    assert [i.location.line for i in info.value.issues] == [BROKEN_LINE]
    assert info.value.revision is not None
    assert info.value.revision != good.revision

    bad.write_text(SPECS[:SPECS.index("local}")])  # half-written: inside a flow mapping
    with pytest.raises(SourceError) as info:
        source.load()
    assert str(info.value).startswith(f"{bad}:")
    assert info.value.issues[0].rule == "yaml-syntax"


def test_a_spec_file_turned_into_a_folder_holds_the_revision(folder: Path) -> None:
    source = FolderSource(folder)
    assert source.load().spec_set.deployments
    spec = folder / "team" / "vlm.yaml"
    spec.unlink()
    spec.mkdir()  # the same name, now a folder (empty: walked, it would delete vlm)
    with pytest.raises(SourceError) as info:
        source.load()
    assert str(info.value).startswith(f"{spec}: a folder named like a spec file")


def test_folder_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        FolderSource(tmp_path / "absent").load()
    assert "no such file or folder" in str(info.value)
    assert info.value.revision is None


def test_folder_watch_reports_saves_within_a_second_and_stops_promptly(folder: Path) -> None:
    source = FolderSource(folder)
    loaded = source.load()
    spec = folder / "team" / "vlm.yaml"
    with watching(source) as w:
        saved = time.monotonic()
        spec.write_text(SPECS.replace("18000", "18002"))
        assert w.seconds_until_call_after(saved) < SAVE_NOTICED_S
        assert source.load().revision != loaded.revision

        saved = time.monotonic()
        (folder / "team" / "new.yaml").write_text(OTHER_HOST)
        assert w.seconds_until_call_after(saved) < SAVE_NOTICED_S
        assert names(source.load()) == ["Deployment/vlm", "Host/local", "Host/other"]

        (folder / "deep" / "er").mkdir(parents=True)
        saved = time.monotonic()
        (folder / "deep" / "er" / "x.yaml").write_text(BROKEN)  # invalid: still a change
        assert w.seconds_until_call_after(saved) < SAVE_NOTICED_S
        assert w.halt() < STOPPED_S


def test_folder_watch_notices_a_folder_that_appears_later(tmp_path: Path) -> None:
    root = tmp_path / "later"
    source = FolderSource(root)
    with pytest.raises(SourceError):
        source.load()
    with watching(source) as w:
        made = time.monotonic()
        root.mkdir()
        (root / "a.yaml").write_text(SPECS)
        w.seconds_until_call_after(made)
        assert names(source.load()) == ["Deployment/vlm", "Host/local"]


def test_folder_poke_calls_changed_without_a_change(folder: Path) -> None:
    source = FolderSource(folder)
    source.load()
    with watching(source) as w:
        poked = time.monotonic()
        source.poke()
        assert w.seconds_until_call_after(poked) < POKE_NOTICED_S
        assert w.halt() < STOPPED_S


def test_folder_filter_ignores_editor_temporaries(folder: Path) -> None:
    source = FolderSource(folder)
    change = watchfiles.Change.modified
    for name in ["team/vlm.yaml", "team/new.yml", "team", "team/.hidden.yaml"]:
        assert source.is_relevant(change, str(folder / name)), name
    for name in [".vlm.yaml.swp", "team/vlm.yaml~", "team/4913", "team/.#vlm.yaml",
                 "#vlm.yaml#", ".git/index", ".git/refs/heads/main", ".cache"]:
        assert not source.is_relevant(change, str(folder / name)), name


# --- git ---------------------------------------------------------------------------------------

@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


def git_source(repo: GitRepo, tmp_path: Path, interval_s: float = 30.0) -> GitSource:
    return GitSource(repo.url, repo.branch, tmp_path / "state" / "git", interval_s=interval_s)


def test_git_load_gives_the_commit_and_its_resources(repo: GitRepo, tmp_path: Path) -> None:
    sha = repo.commit({"deploy/vlm.yaml": SPECS})
    source = git_source(repo, tmp_path)
    assert source.name == f"git:{repo.url}#main"
    snapshot = source.load()
    assert snapshot.revision == sha
    assert names(snapshot) == ["Deployment/vlm", "Host/local"]
    assert snapshot.root == tmp_path / "state" / "git" / SNAPSHOTS_DIR / sha
    assert (snapshot.root / "deploy" / "vlm.yaml").read_text() == SPECS
    doc_file = snapshot.spec_set.source_file(snapshot.spec_set.deployments[0])
    assert doc_file == "deploy/vlm.yaml"  # the repository path a person edits

    again = source.load()  # reused, not extracted again
    assert again.revision == sha
    assert again.root.stat().st_ino == snapshot.root.stat().st_ino


def test_git_broken_commit_is_refused_then_fixed(repo: GitRepo, tmp_path: Path) -> None:
    good = repo.commit({"deploy/vlm.yaml": SPECS})
    source = git_source(repo, tmp_path)
    assert source.load().revision == good

    broken = repo.commit({"deploy/vlm.yaml": BROKEN}, "oops")
    with pytest.raises(SourceError) as info:
        source.load()
    text = str(info.value)
    assert text == f"deploy/vlm.yaml:{BROKEN_LINE}:3: spec.bogus: unknown field (schema)"
    assert str(tmp_path) not in text
    assert info.value.revision == broken

    fixed = repo.commit({"deploy/vlm.yaml": SPECS.replace("18000", "18003")}, "fix")
    snapshot = source.load()
    assert snapshot.revision == fixed
    assert snapshot.spec_set.deployments[0].spec.port.host == 18003


def test_git_path_restricts_loading_to_a_folder(repo: GitRepo, tmp_path: Path) -> None:
    sha = repo.commit({"deploy/vlm.yaml": SPECS, "drafts/bad.yaml": BROKEN})
    only = GitSource(repo.url, "main", tmp_path / "a", path="deploy/")
    assert only.name == f"git:{repo.url}#main:deploy"
    snapshot = only.load()
    assert snapshot.revision == sha
    assert names(snapshot) == ["Deployment/vlm", "Host/local"]
    assert snapshot.spec_set.source_file(snapshot.spec_set.hosts[0]) == "deploy/vlm.yaml"

    with pytest.raises(SourceError) as info:
        GitSource(repo.url, "main", tmp_path / "b").load()
    assert str(info.value).startswith(f"drafts/bad.yaml:{BROKEN_LINE}:3:")

    with pytest.raises(SourceError) as info:
        GitSource(repo.url, "main", tmp_path / "c", path="nowhere").load()
    assert "'nowhere' does not exist" in str(info.value)
    assert sha in str(info.value)

    with pytest.raises(ValueError, match=r"without '\.\.'"):
        GitSource(repo.url, "main", tmp_path / "d", path="../etc")


def test_git_unknown_branch_or_unreachable_url_is_a_clear_error(repo: GitRepo,
                                                                 tmp_path: Path) -> None:
    repo.commit({"deploy/vlm.yaml": SPECS})
    with pytest.raises(SourceError) as info:
        GitSource(repo.url, "nope", tmp_path / "a").load()
    assert str(info.value) == f"branch 'nope' does not exist in {repo.url}"
    assert info.value.issues == []
    assert info.value.revision is None

    absent = (tmp_path / "absent.git").as_uri()
    with pytest.raises(SourceError) as info:
        GitSource(absent, "main", tmp_path / "b").load()
    message = str(info.value)
    assert message.startswith(f"cannot fetch branch 'main' from {absent}: ")
    assert "does not appear to be a git repository" in message

    with pytest.raises(ValueError, match="invalid branch name 'bad branch'"):
        GitSource(repo.url, "bad branch", tmp_path / "c")


def test_git_watch_long_interval_answers_a_poke(repo: GitRepo, tmp_path: Path) -> None:
    repo.commit({"deploy/vlm.yaml": SPECS})
    source = git_source(repo, tmp_path, interval_s=3600.0)
    source.load()
    with watching(source) as w:
        poked = time.monotonic()
        source.poke()
        assert w.seconds_until_call_after(poked) < POKE_NOTICED_S
        assert w.halt() < STOPPED_S


def test_git_watch_short_interval_notices_a_commit(repo: GitRepo, tmp_path: Path) -> None:
    repo.commit({"deploy/vlm.yaml": SPECS})
    source = git_source(repo, tmp_path, interval_s=0.05)
    source.load()
    with watching(source) as w:
        pushed = time.monotonic()
        sha = repo.commit({"deploy/other.yaml": OTHER_HOST}, "another host")
        w.seconds_until_call_after(pushed)
        snapshot = source.load()
        assert snapshot.revision == sha
        assert names(snapshot) == ["Deployment/vlm", "Host/local", "Host/other"]
        assert w.halt() < STOPPED_S


def test_git_snapshots_are_pruned_but_the_last_good_one_is_kept(repo: GitRepo,
                                                                 tmp_path: Path) -> None:
    good = repo.commit({"deploy/vlm.yaml": SPECS})
    source = git_source(repo, tmp_path)
    good_root = source.load().root
    for n in range(KEEP_SNAPSHOTS + 2):
        repo.commit({"deploy/vlm.yaml": BROKEN + f"# try {n}\n"}, f"try {n}")
        with pytest.raises(SourceError):
            source.load()
    snapshots = sorted(p.name for p in (tmp_path / "state" / "git" / SNAPSHOTS_DIR).iterdir())
    assert good_root.is_dir()
    assert good in snapshots
    assert len(snapshots) == KEEP_SNAPSHOTS  # and no temp folders left behind


def test_git_symlinks_are_not_materialized_and_a_spec_link_refuses_the_revision(
        repo: GitRepo, tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(BROKEN)
    repo.symlink("deploy/link.yaml", str(outside))
    repo.symlink("deploy/README.md", "../README.md")  # a file, not a spec: harmless
    repo.symlink("deploy/team.v2", "../teams/v2")  # a folder behind a dotted name
    sha = repo.commit({"deploy/vlm.yaml": SPECS, "README.md": "docs\n",
                       "teams/v2/notes.txt": "a folder\n"})
    source = git_source(repo, tmp_path)
    with pytest.raises(SourceError) as info:
        source.load()
    assert "deploy/link.yaml" in str(info.value)
    assert "deploy/team.v2" in str(info.value)
    assert "README" not in str(info.value)
    assert info.value.revision == sha
    assert not (tmp_path / "state" / "git" / SNAPSHOTS_DIR / sha / "deploy" / "link.yaml"
                ).exists()
    repo.commit({"deploy/link.yaml": None, "deploy/team.v2": None})
    snapshot = source.load()
    assert names(snapshot) == ["Deployment/vlm", "Host/local"]
    assert not (snapshot.root / "deploy" / "README.md").exists()


def test_git_environment_is_clean_and_env_reaches_git(repo: GitRepo, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    sha = repo.commit({"deploy/vlm.yaml": SPECS})
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "not-a-repo"))  # as inside a git hook
    # An alias URL that only git config from `env` can resolve.
    env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{repo.url}.insteadOf",
           "GIT_CONFIG_VALUE_0": "specs://team"}
    source = GitSource("specs://team", "main", tmp_path / "state", env=env)
    assert source.load().revision == sha


def test_git_concurrent_loads_share_one_mirror(repo: GitRepo, tmp_path: Path) -> None:
    sha = repo.commit({"deploy/vlm.yaml": SPECS})
    source = git_source(repo, tmp_path)
    results: list[Snapshot | BaseException] = []

    def load() -> None:
        try:
            results.append(source.load())
        except BaseException as exc:  # collected and shown below
            results.append(exc)
    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(isinstance(r, Snapshot) and r.revision == sha for r in results), results
    assert len(results) == 4


def test_credentials_in_urls_are_redacted() -> None:
    assert redact_urls("https://bot:s3cret@git.example/specs.git") == \
        "https://git.example/specs.git"
    assert redact_urls("ssh://git@git.example/specs.git") == "ssh://git.example/specs.git"
    source = GitSource("https://bot:s3cret@git.example/specs.git", "main", Path("/nonexistent"))
    assert "s3cret" not in source.name



def test_git_s_complaint_reads_the_same_whatever_order_its_lines_came_in(tmp_path: Path) -> None:
    """Issue 26: a persistent fetch failure made one Warning event per poll, because git and
    ssh wrote their stderr lines in another order each time."""
    source = GitSource(f"file://{tmp_path}/absent.git", "main", tmp_path / "work")
    one = b"ssh: connect to host x: Connection refused\nfatal: Could not read from remote\n"
    two = b"fatal: Could not read from remote\n\nssh: connect to host x: Connection refused\n"
    assert source._trim(one) == source._trim(two)
    assert source._trim(one) == ("fatal: Could not read from remote | ssh: connect to host x: "
                                 "Connection refused")
