"""The trust boundary (issue 26): what a spec may read and run is the operator's to say, and a
spec reaching outside it is refused at validate and plan, naming the field and the rule, with
nothing read or run. The default allows nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.sources import FolderSource
from reconciler.sources.base import SourceError
from specs.trust import R_TRUST, TrustError, TrustPolicy, load_policy, policy
from specs.validate import load_spec_set
from tests.conftest import RECONCILER
from tests.specs.every_field import FIXTURE

SECRET_LINE = 33  # "- {name: API_TOKEN, fromFile: /run/secrets/token}" in the fixture


def _fixture_with(tmp_path: Path, **replace: str) -> Path:
    text = FIXTURE.read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    (folder / "all.yaml").write_text(text)
    return folder


def _reconciler(tmp_path: Path, *args: str, trust: Path | None = None
                ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RECONCILER_TRUST"}
    env.update({"XDG_CONFIG_HOME": str(tmp_path / "config"),  # no trust file there
                "RECONCILER_STATE_DIR": str(tmp_path / "state")})
    if trust is not None:
        env["RECONCILER_TRUST"] = str(trust)
    return subprocess.run([RECONCILER, *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def _reads_nothing(tmp_path: Path) -> Path:
    """A FIFO where a secret file should be: whoever opens it to read blocks (the command
    would time out), so a refusal that returns proves nothing was read."""
    fifo = tmp_path / "outside" / "token"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    return fifo


def test_by_default_a_spec_may_read_no_file_and_run_no_command(tmp_path: Path) -> None:
    fifo = _reads_nothing(tmp_path)
    specs = _fixture_with(tmp_path, **{"/run/secrets/token": str(fifo)})
    done = _reconciler(tmp_path, "validate", str(specs))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if f"({R_TRUST})" in line]
    assert any(line.startswith(f"{specs}/all.yaml:{SECRET_LINE}:") and
               "spec.secrets.1.fromFile:" in line and "set by the default" in line
               for line in lines), done.stderr
    # Every category the fixture reads, and the harness commands, are refused: 2 secrets (a
    # Deployment's, a registry password), 7 media files, 6 harness paths (3 checkouts, 3
    # configs judged inside them), 1 mount, 4 SSH files, 1 evidence root, 1 image archive, 3
    # commands: 25, of which a file shows 20 and says how many more (max-issues).
    assert len(lines) == 20, lines
    assert "5 more issue(s) in this file not shown" in done.stderr
    assert "21 errors; nothing was changed." in done.stderr
    assert sum("does not start with a command" in line for line in lines) == 3


def test_the_operator_s_folders_and_commands_let_exactly_those_through(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    specs = _fixture_with(tmp_path, **{"/run/secrets/token": str(secrets / "token")})
    trust = tmp_path / "trust.toml"
    trust.write_text(f'[read]\nsecrets = ["{secrets}", "/keys"]\nmedia = ["/media"]\n'
                     'harness = ["/opt/vss"]\nmounts = ["/models"]\nssh = ["/keys"]\n'
                     'evidence = ["/var/lib"]\nimages = ["/images"]\n'
                     '[run]\ncommands = ["python3"]\n')
    done = _reconciler(tmp_path, "validate", str(specs), trust=trust)
    assert done.returncode == 0, done.stderr
    # The same set with one command left out: only the harness argv is refused.
    trust.write_text(trust.read_text().replace('commands = ["python3"]', "commands = []"))
    done = _reconciler(tmp_path, "validate", str(specs), trust=trust)
    assert done.returncode == 1
    assert done.stderr.count(f"({R_TRUST})") == 3
    # Options add to it, for one command line.
    done = _reconciler(tmp_path, "--allow-run", "python3", "validate", str(specs), trust=trust)
    assert done.returncode == 0, done.stderr


def test_plan_refuses_before_it_reads_or_runs_anything(tmp_path: Path) -> None:
    fifo = _reads_nothing(tmp_path)
    specs = _fixture_with(tmp_path, **{"/run/secrets/token": str(fifo)})
    done = _reconciler(tmp_path, "--allow-read", f"secrets={tmp_path}/elsewhere", "plan",
                       str(specs))
    assert done.returncode == 1
    assert f"{specs}/all.yaml:{SECRET_LINE}:" in done.stderr
    assert "nothing was changed" in done.stderr


def test_a_symlink_inside_an_allowed_folder_that_points_out_is_outside(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "shadow").symlink_to("/etc/shadow")
    (allowed / "ok").write_text("x")
    trust = policy({"secrets": (str(allowed),)}, (), "test")
    assert not trust.allowed("secrets", str(allowed / "shadow"))
    assert trust.allowed("secrets", str(allowed / "ok"))
    assert not trust.allowed("secrets", str(allowed) + "-other/x")  # a prefix is not a folder
    assert not trust.allowed("media", str(allowed / "ok"))  # folders are per category


def test_the_daemon_s_sources_refuse_by_default(tmp_path: Path) -> None:
    fifo = _reads_nothing(tmp_path)
    specs = _fixture_with(tmp_path, **{"/run/secrets/token": str(fifo)})
    with pytest.raises(SourceError) as info:
        FolderSource(specs).load()
    assert {i.rule for i in info.value.issues} - {"max-issues"} == {R_TRUST}
    allowed = policy({"secrets": (str(fifo.parent), "/keys"), "media": ("/media",),
                      "harness": ("/opt/vss",), "mounts": ("/models",), "ssh": ("/keys",),
                      "evidence": ("/var/lib",), "images": ("/images",)}, ("python3",),
                     "test")
    assert FolderSource(specs, trust=allowed).load().spec_set.resources


@pytest.mark.parametrize(("text", "why"), [
    ("[read\n", "not TOML"),
    ('[read]\nsecret = ["/x"]\n', "unknown category 'secret'"),
    ('[read]\nmedia = ["relative"]\n', "must be an absolute path"),
    ('[runs]\ncommands = ["x"]\n', "expected only [read]"),
    ('[run]\ncommands = "python3"\n', "expected only [read]"),
])
def test_a_bad_trust_file_is_named_with_why(tmp_path: Path, text: str, why: str) -> None:
    trust = tmp_path / "trust.toml"
    trust.write_text(text)
    with pytest.raises(TrustError, match=None) as info:
        load_policy(trust)
    assert str(trust) in str(info.value)
    assert why in str(info.value) or "a list" in str(info.value), info.value
    done = _reconciler(tmp_path, "validate", str(FIXTURE), trust=trust)
    assert done.returncode == 1
    assert done.stderr.startswith("error: trust file ")
    assert "Traceback" not in done.stderr


def test_allow_read_needs_a_category(tmp_path: Path) -> None:
    with pytest.raises(TrustError, match="expected CATEGORY=DIR"):
        TrustPolicy().with_cli(("/srv/media",), ())
    done = _reconciler(tmp_path, "--allow-read", "/srv", "validate", str(FIXTURE))
    assert done.returncode == 1
    assert "expected CATEGORY=DIR" in done.stderr


def test_every_field_that_reads_or_runs_is_declared_on_the_models() -> None:
    """What the boundary judges comes from the models' marks: the fixture's reads and runs
    are all found (a field that reads but is not marked would pass unjudged)."""
    spec_set = load_spec_set([FIXTURE])
    found = sorted(".".join(map(str, path)) for res in spec_set.resources
                   for path, _, _ in TrustPolicy().findings(res))
    assert "spec.secrets.1.fromFile" in found
    assert "spec.benchmark.harness.argv.0" in found
    assert "spec.capacity.harness.harness.config" in found  # relative: judged in its workdir
    assert "spec.mounts.0.source" in found
    assert "spec.ssh.keyFile" in found
    assert "spec.evidenceRoot" in found
    assert "spec.registries.1.password.fromFile" in found
    assert "spec.images.archives.0" in found
    assert len(found) == 25
    assert sys.executable  # the stand-in's Python is what tests allow (tests/conftest.py)


def test_a_command_may_be_pinned_to_its_first_arguments() -> None:
    """Allowing ``python3`` lets any Python program run (``python3 -c ...``); an operator can
    allow exactly the harness instead."""
    pinned = policy({}, ("python3 perf/benchmark/run.py",), "test")
    assert list(pinned._run(("argv",), ["python3", "perf/benchmark/run.py", "--x"])) == []
    [(where, message, rule)] = pinned._run(("argv",), ["python3", "-c", "import os"])
    assert (where, rule) == (("argv", 0), R_TRUST)
    assert message.startswith('"python3 -c ')
    with pytest.raises(TrustError, match="shell words"):
        policy({}, ("",), "test")


def test_an_absolute_argument_after_the_allowed_command_is_a_read(tmp_path: Path) -> None:
    """The harness runs with the folder of every absolute argument bound: the spec's own
    arguments may name files in the harness and media folders only."""
    (tmp_path / "media").mkdir()
    pinned = policy({"media": (str(tmp_path / "media"),)}, ("python3 run.py",), "test")
    ok = ["python3", "run.py", "--clip", str(tmp_path / "media" / "a.mp4"), "--flag"]
    assert list(pinned._run(("argv",), ok)) == []
    [(where, message, rule)] = pinned._run(("argv",), ["python3", "run.py", "/etc/shadow"])
    assert (where, rule) == (("argv", 2), R_TRUST)
    assert message.startswith("argument '/etc/shadow' is outside the folders harness and media")
    # An option's value, and a relative path that climbs out of the working directory.
    workdir = str(tmp_path / "media" / "rt")
    for sneaky in ("--x=/etc/shadow", "../../../../../../../../etc/shadow"):
        [(where, message, _)] = pinned._run(("argv",), ["python3", "run.py", sneaky], workdir)
        assert message.startswith("argument '/etc/shadow' is outside"), sneaky
    assert list(pinned._run(("argv",), ["python3", "run.py", "--scenario", "burst",
                                        "perf/cfg.yaml", "--n=2"], workdir)) == []


def test_a_secret_is_judged_again_where_it_is_read(tmp_path: Path) -> None:
    """Validation judged the path; a symlink planted in the allowed folder afterwards (by a
    container that may write there) must not lead the read out of it. The file actually
    opened is judged, so there is no window between the check and the read."""
    from controllers.errors import SecretRefused
    from controllers.secrets import resolve
    from specs.models import SecretRef
    from specs.trust import enforce

    allowed, outside = tmp_path / "secrets", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "token").write_text("inside-token\n")
    (outside / "shadow").write_text("outside-value\n")
    (allowed / "planted").symlink_to(outside / "shadow")
    enforce(policy({"secrets": (str(allowed),)}, (), "test"))
    try:
        assert resolve(SecretRef(name="T", fromFile=str(allowed / "token"))) == "inside-token"
        with pytest.raises(SecretRefused, match="outside the folders secrets may be read from"):
            resolve(SecretRef(name="T", fromFile=str(allowed / "planted")))
    finally:
        enforce(None)


def test_a_relative_harness_config_is_judged_where_it_leads(tmp_path: Path) -> None:
    """A config relative to an allowed checkout that is a link out of it is outside: the
    relative path is joined to its workdir and resolved like any other."""
    checkout = tmp_path / "vss"
    (checkout / "perf").mkdir(parents=True)
    (checkout / "perf" / "config.yaml").symlink_to("/etc/passwd")
    specs = _fixture_with(tmp_path, **{"/opt/vss/rt-vlm": str(checkout)})
    trust = policy({"harness": (str(checkout),)}, (), "test")
    found = [(".".join(map(str, path)), message)
             for res in load_spec_set([specs]).resources
             for path, message, _ in trust.findings(res) if "config" in path]
    assert found
    assert all(f"{str(checkout / 'perf' / 'config.yaml')!r} (it leads to '/etc/passwd')"
               in message for _, message in found), found
