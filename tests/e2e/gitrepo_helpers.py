"""Real Git repositories for source tests: a bare "remote" and a working clone that pushes to it.

Every git call carries its own author and committer identity: CI machines have no global one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BRANCH = "main"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Spec Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Spec Author", "GIT_COMMITTER_EMAIL": "author@example.invalid",
}


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENTITY)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, env=git_env(), capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 0, f"git {' '.join(args)} failed: {result.stderr}"
    return result.stdout.strip()


class GitRepo:
    """A bare repository (what the daemon follows) and a clone we commit in and push from."""

    def __init__(self, root: Path, branch: str = BRANCH) -> None:
        self.bare = root / "remote.git"
        self.work = root / "work"
        self.branch = branch
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "--quiet", "--bare", f"--initial-branch={branch}", str(self.bare))
        git(root, "init", "--quiet", f"--initial-branch={branch}", str(self.work))

    @property
    def url(self) -> str:
        return self.bare.as_uri()

    def commit(self, files: dict[str, str | None], message: str = "specs") -> str:
        """Write (or, for None, delete) files, commit, push; return the new commit SHA."""
        for rel, text in files.items():
            target = self.work / rel
            if text is None:
                git(self.work, "rm", "--quiet", "-r", rel)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            git(self.work, "add", rel)
        git(self.work, "commit", "--quiet", "--allow-empty", "-m", message)
        git(self.work, "push", "--quiet", str(self.bare), f"HEAD:refs/heads/{self.branch}")
        return git(self.work, "rev-parse", "HEAD")

    def symlink(self, rel: str, points_to: str) -> None:
        target = self.work / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(points_to)
        git(self.work, "add", rel)
