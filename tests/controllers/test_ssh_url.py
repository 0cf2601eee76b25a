"""An SSH Host's URL is split by the pattern the spec is validated with: what validates is
exactly what connects (``controllers.clients.ssh.parse_ssh_url``)."""

from __future__ import annotations

import getpass

import pytest

from controllers.clients.ssh import DEFAULT_SSH_PORT, SshTarget, parse_ssh_url
from controllers.errors import PermanentError
from specs.models import docker_url_problem


@pytest.mark.parametrize(("url", "target"), [
    ("ssh://root@127.0.0.1:2222", SshTarget("root", "127.0.0.1", 2222)),
    ("ssh://gpu-box.example", SshTarget(getpass.getuser(), "gpu-box.example", DEFAULT_SSH_PORT)),
    ("ssh://perf@[::1]:22/", SshTarget("perf", "::1", 22)),
])
def test_a_valid_url_is_split_into_user_host_and_port(url: str, target: SshTarget) -> None:
    assert docker_url_problem(url) is None
    assert parse_ssh_url(url, "edge") == target


@pytest.mark.parametrize("url", [
    "ssh://-oProxyCommand=id", "ssh://u:secret@h", "ssh://h/var/run", "ssh://h?x=1",
    "ssh://h:0", "ssh://h:99999", "http://h", "ssh://h\n", "ssh://[fe80::1%eth0]",
])
def test_what_the_spec_refuses_never_connects(url: str) -> None:
    assert docker_url_problem(url) is not None
    with pytest.raises(PermanentError, match="Host edge: invalid SSH URL"):
        parse_ssh_url(url, "edge")
