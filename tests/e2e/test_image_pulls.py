"""Images come from registries (issue 37): a real registry on loopback (TLS, an htpasswd
login as NGC has it), real engines, the real CLI and daemon.

The registry's password is a canary: after each test every file the run left (state, log,
events, outputs) is searched for it.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from controllers.kinds.host.pulls import STALL_ENV
from controllers.waiting import until
from tests.conftest import TEST_IMAGE_TAG, Cli, containers_of
from tests.e2e.daemon_helpers import events_of
from tests.e2e.stream_helpers import condition, status
from tests.ports import free_port
from tests.registry import Registry
from tests.remote_engine import (  # noqa: F401  (fixtures)
    RemoteEngine,
    remote_engine_fixture,
    remote_fixture,
)
from tests.specs_factory import HOST, deployment, write
from tests.throttle import SlowLink

REPO = "vss/rt-vlm"


def _host(registry: Registry, name: str = "local", docker_url: str | None = None,
          extra: dict[str, Any] | None = None, server: str | None = None) -> dict[str, Any]:
    login = {**registry.login, "server": server or registry.address}
    spec: dict[str, Any] = {**HOST["spec"], "registries": [login]}  # type: ignore[dict-item]
    if docker_url is not None:
        spec["docker"] = docker_url
    spec.update(extra or {})
    return {**HOST, "metadata": {"name": name}, "spec": spec}


def _no_canary(folder: Path, *texts: str, canaries: tuple[str, ...]) -> None:
    """No canary in any file under ``folder`` nor in ``texts`` (a test's outputs)."""
    for canary in canaries:
        for text in texts:
            assert canary not in text
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_socket():
                assert canary.encode() not in path.read_bytes(), path


def test_a_fresh_host_pulls_by_digest_with_credentials_by_reference(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        instance: str, tmp_path: Path) -> None:
    digest = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "fresh")
    image = f"{registry.address}/{REPO}@{digest}"
    specs = tmp_path / "specs"
    port = free_port()
    write(specs, deployment("vlm", image, port), host=False)
    (specs / "host.yaml").write_text(json.dumps(_host(registry)))

    # The plan names the pull, its cause and its registry, before the create.
    plan = cli("plan", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"pull image {image}" in plan.stdout
    assert f"it is not on Host local; from registry {registry.address} (as $oauthtoken)" in (
        plan.stdout)
    assert plan.stdout.index("pull image") < plan.stdout.index("create container")

    # Without the registry in the operator's trust: refused, naming the rule.
    untrusted = tmp_path / "trust.toml"
    untrusted.write_text("[read]\n")
    refused = cli("--trust", str(untrusted), "plan", str(specs))
    assert refused.returncode == 1
    assert f"registry {registry.address} is not one images may be pulled from" in (
        refused.stdout + refused.stderr)
    assert "trust boundary" in refused.stdout + refused.stderr

    # A wrong password: Degraded with the registry's own reason, nothing created.
    wrong = "canary-wrong-" + registry.password[-8:]
    cli.extra_env["NGC_API_KEY"] = wrong
    failed = cli("apply", str(specs), "--timeout", "60")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    record = status(cli, "vlm")
    degraded = condition(record, "Degraded")
    assert degraded["status"] == "True"
    assert degraded["reason"] == "PullFailed"
    assert "unauthorized" in degraded["message"].lower() or "authentication" in (
        degraded["message"].lower())
    assert containers_of(docker_client, instance) == []

    # The right one: pulled, verified, serving; the digest recorded.
    cli.extra_env["NGC_API_KEY"] = registry.password
    done = cli("apply", str(specs), "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"pulling {image}" in done.stdout + done.stderr
    record = status(cli, "vlm")
    assert condition(record, "Ready")["status"] == "True"
    assert record["facts"]["imageDigest"] == digest
    assert docker_client.images.get(image).id == containers_of(docker_client, instance)[0].image.id
    events = cli("events")
    assert "Pulled" in events.stdout
    again = cli("plan", str(specs))
    assert again.returncode == 0, again.stdout  # in sync: nothing pulled twice

    # A new digest with the wrong password: the running service is left as it was.
    old = containers_of(docker_client, instance)[0].id
    bumped = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "fresh-2")
    write(specs, deployment("vlm", f"{registry.address}/{REPO}@{bumped}", port), host=False)
    cli.extra_env["NGC_API_KEY"] = wrong
    assert cli("apply", str(specs), "--timeout", "60").returncode == 1
    assert condition(status(cli, "vlm"), "Degraded")["reason"] == "PullFailed"
    assert containers_of(docker_client, instance)[0].id == old
    ready = httpx.get(f"http://127.0.0.1:{port}/v1/health/ready", timeout=5)
    assert ready.status_code == 200

    _no_canary(cli.state_dir, *cli.transcript, canaries=(registry.password, wrong))
    for container in containers_of(docker_client, instance):
        assert registry.password not in json.dumps(container.attrs)


def test_a_digest_bump_pulls_while_the_old_service_answers(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        instance: str, tmp_path: Path) -> None:
    """The daemon: a new digest is pulled (a 48 MiB layer of random bytes) while the old
    service answers /v1/health/ready throughout; only then is it replaced. A registry that is
    down leaves the old service serving (Degraded, PullFailed) until it is back."""
    first = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "one")
    second = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "two", random_mib=48)
    specs = tmp_path / "specs"
    port = free_port()
    (specs).mkdir()
    (specs / "host.yaml").write_text(json.dumps(_host(registry)))

    def spec(digest: str) -> None:
        write(specs, deployment("vlm", f"{registry.address}/{REPO}@{digest}", port),
              host=False)

    spec(first)
    cli.extra_env["NGC_API_KEY"] = registry.password
    daemon = cli.popen("run", "--specs", str(specs), "--metrics-address", "off", "--resync", "3")
    try:
        def digest_ready(digest: str) -> bool | None:
            done = cli("status", "vlm", "-o", "json")
            if done.returncode != 0:
                return None
            status = json.loads(done.stdout)
            ready = [c for c in status["conditions"] if c["type"] == "Ready"]
            return True if (ready and ready[0]["status"] == "True"
                            and status["facts"].get("imageDigest") == digest) else None
        assert until(lambda: digest_ready(first), timeout_s=120, pace=0.5), (
            cli("status", "vlm", "-o", "json").stdout)
        old = containers_of(docker_client, instance)[0].id

        # The registry down: the bump is Degraded with its reason, the old one serves.
        registry.stop()
        spec(second)

        def degraded() -> str | None:
            status = json.loads(cli("status", "vlm", "-o", "json").stdout)
            found = [c for c in status["conditions"] if c["type"] == "Degraded"]
            return found[0]["message"] if found and found[0]["status"] == "True" and (
                found[0]["reason"] == "PullFailed") else None
        why = until(degraded, timeout_s=60, pace=0.3)
        assert why is not None
        assert registry.address in why
        ready = httpx.get(f"http://127.0.0.1:{port}/v1/health/ready", timeout=5)
        assert ready.status_code == 200
        assert containers_of(docker_client, instance)[0].id == old

        # Back: pulled while the old service answers every probe, then replaced.
        answers: list[tuple[float, int]] = []  # (when, status code)
        probing = threading.Event()

        def probe() -> None:
            while not probing.is_set():
                if docker_client.api.inspect_container(old)["State"]["Running"] is False:
                    return  # the replacement began: the pull is over
                try:
                    code = httpx.get(f"http://127.0.0.1:{port}/v1/health/ready",
                                     timeout=2).status_code
                except httpx.HTTPError:
                    code = 0
                answers.append((time.time(), code))
                time.sleep(0.05)
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        registry.start()
        cli("sync")
        assert until(lambda: digest_ready(second), timeout_s=180, pace=0.5)
        probing.set()
        prober.join(10)
        events = cli("events", "vlm").stdout
        assert "Pulled" in events, events
        assert "Recreated" in events, events
        assert events.index("Pulled") < events.index("Recreated")
        # every probe before the old container stopped was answered
        # Every probe until the pull ended was answered (a container being stopped still
        # says Running for a moment after its service stopped answering: the probes after
        # the pull are the replacement's, not the pull's).
        [pulled] = [e for e in events_of(cli, "Deployment/vlm") if e.reason == "Pulled"][-1:]
        pulled_at = datetime.fromisoformat(pulled.time.replace("Z", "+00:00")).timestamp()
        during = [code for at, code in answers if at < pulled_at]
        assert during, ("the old service was never probed during the pull", answers)
        assert all(code == 200 for code in during), answers
    finally:
        daemon.terminate()
        out, err = daemon.communicate(timeout=30)
    _no_canary(cli.state_dir, out, err, *cli.transcript, canaries=(registry.password,))


def test_a_tag_that_moved_is_a_visible_cause(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        instance: str, tmp_path: Path) -> None:
    before = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "explore")
    image = f"{registry.address}/{REPO}:explore"
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", image, free_port(), profile="exploration"), host=False)
    (specs / "host.yaml").write_text(json.dumps(_host(registry)))
    cli.extra_env["NGC_API_KEY"] = registry.password
    assert cli("apply", str(specs), "--timeout", "120").returncode == 0
    assert status(cli, "vlm")["facts"]["imageDigest"] == before
    assert cli("plan", str(specs)).returncode == 0  # the tag has not moved: in sync

    held = docker_client.images.get(image)
    after = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "explore")
    held.tag(f"{registry.address}/{REPO}", "explore")  # as a Host that pulled before holds it
    plan = cli("plan", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"tag {image} moved in {registry.address}: {before} → {after}" in plan.stdout
    done = cli("apply", str(specs), "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert status(cli, "vlm")["facts"]["imageDigest"] == after
    [container] = containers_of(docker_client, instance)
    assert container.image.id == docker_client.images.get(f"{image}").id


@pytest.mark.usefixtures("emulator_image")
def test_an_ssh_host_pulls_through_its_own_engine(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient,
        remote: RemoteEngine, instance: str, tmp_path: Path) -> None:
    digest = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "remote")
    image = f"{registry.address}/{REPO}@{digest}"
    remote_client = remote.client
    with pytest.raises(docker.errors.ImageNotFound):
        remote_client.images.get(image)
    specs = tmp_path / "specs"
    host = remote.host_document("gpu-box")
    host["spec"]["registries"] = [registry.login]
    write(specs, host, deployment("vlm", image, free_port(), host="gpu-box"), host=False)
    cli.extra_env["NGC_API_KEY"] = registry.password
    done = cli("apply", str(specs), "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert remote_client.images.get(image).attrs["RepoDigests"] == [image]
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(image)  # pulled there, not here
    _no_canary(cli.state_dir, *cli.transcript, canaries=(registry.password,))


def test_too_little_room_is_refused_before_pulling(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        tmp_path: Path) -> None:
    """A Host whose data root (a 64 MiB tmpfs on a private engine) cannot hold the image
    (its manifest: over 80 MiB of random bytes, compressed as they are): refused before the
    pull, naming both sizes; nothing is written there."""
    digest = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "large", random_mib=80)
    image = f"{registry.address}/{REPO}@{digest}"
    with RemoteEngine(data_root_mib=64) as small:
        client = small.client
        before = os.statvfs(small.root / "data").f_bavail
        specs = tmp_path / "specs"
        write(specs, deployment("vlm", image, free_port(), host="small"), host=False)
        (specs / "host.yaml").write_text(json.dumps(
            _host(registry, "small", small.docker_url)))
        cli.extra_env["NGC_API_KEY"] = registry.password
        done = cli("apply", str(specs), "--timeout", "60")
        assert done.returncode == 1, done.stdout + done.stderr
        degraded = condition(status(cli, "vlm"), "Degraded")
        assert degraded["reason"] == "PullFailed"
        assert "not enough room to pull" in degraded["message"]
        assert "MB compressed (the registry's manifest)" in degraded["message"]
        assert client.images.list(all=True) == []
        after = os.statvfs(small.root / "data").f_bavail
        assert abs(before - after) * os.statvfs(small.root / "data").f_frsize < 1 << 20


def _pulls_of(client: docker.DockerClient, name: str, since: float) -> int:
    """How many pulls of ``name`` the engine made since ``since`` (its own image events)."""
    events = client.events(since=since, until=time.time(), decode=True,
                           filters={"type": "image", "event": "pull"})
    return sum(1 for e in events if str(e.get("id", "")).startswith(name))


def test_one_pull_serves_every_deployment_and_what_nothing_uses_is_pruned(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        instance: str, tmp_path: Path) -> None:
    """The daemon: three Deployments on one absent image share one pull; moved to another
    image, the first is removed once no container uses it (images.prune), and an image the
    reconciler did not bring is never removed."""
    first = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "shared-1")
    second = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "shared-2")
    name = f"{registry.address}/{REPO}"
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "host.yaml").write_text(json.dumps(_host(registry, extra={
        "images": {"prune": True}})))
    ports = [free_port() for _ in range(3)]

    def spec(digest: str) -> None:
        write(specs, *(deployment(f"vlm{i}", f"{name}@{digest}", port)
                       for i, port in enumerate(ports)), host=False)

    spec(first)
    since = time.time()
    cli.extra_env["NGC_API_KEY"] = registry.password
    daemon = cli.popen("run", "--specs", str(specs), "--metrics-address", "off", "--resync", "3")
    try:
        def all_on(digest: str) -> bool | None:
            done = cli("status", "-o", "json")
            if done.returncode != 0:
                return None
            records = [r for r in json.loads(done.stdout) if r["kind"] == "Deployment"]
            return True if len(records) == 3 and all(
                r["facts"].get("imageDigest") == digest and any(
                    c["type"] == "Ready" and c["status"] == "True" for c in r["conditions"])
                for r in records) else None
        assert until(lambda: all_on(first), timeout_s=120, pace=0.5)
        assert _pulls_of(docker_client, name, since) == 1
        events = cli("events").stdout
        assert events.count("Pulled") == 3  # one pull, said to each Deployment it served

        spec(second)
        assert until(lambda: all_on(second), timeout_s=120, pace=0.5)

        def pruned() -> bool | None:
            try:
                docker_client.images.get(f"{name}@{first}")
            except docker.errors.ImageNotFound:
                return True
            return None
        assert until(pruned, timeout_s=30, pace=0.5), cli("events").stdout
        assert "Pruned" in cli("events").stdout
        docker_client.images.get(emulator_image)  # not ours to remove: still there
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)


def test_a_mirror_serves_another_registrys_image(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        instance: str, tmp_path: Path) -> None:
    """A Host that reaches only its mirror: ``nvcr.io/...@digest`` is pulled from the mirror's
    copy (same path, same digest); nvcr.io is never asked (nor allowed by the trust file)."""
    digest = registry.push(docker_client, TEST_IMAGE_TAG, "nvidia/vss-engine/rt-vlm", "m")
    image = f"nvcr.io/nvidia/vss-engine/rt-vlm@{digest}"
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", image, free_port()), host=False)
    (specs / "host.yaml").write_text(json.dumps(_host(registry, extra={
        "images": {"mirror": registry.address}})))
    cli.extra_env["NGC_API_KEY"] = registry.password
    plan = cli("plan", str(specs))
    assert f"from registry {registry.address} (as $oauthtoken, mirroring nvcr.io)" in plan.stdout
    done = cli("apply", str(specs), "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert status(cli, "vlm")["facts"]["imageDigest"] == digest
    assert cli("plan", str(specs)).returncode == 0  # found under the mirror's name: in sync


def test_an_air_gapped_host_loads_its_image_from_an_archive(
        cli: Cli, docker_client: docker.DockerClient, emulator_image: str, instance: str,
        tmp_path: Path) -> None:
    """No registry at all: the image, pinned by its ID, comes from a ``docker save`` archive
    the Host lists (in the operator's images folders), streamed to its engine."""
    with tempfile.TemporaryDirectory() as context:
        (Path(context) / "Dockerfile").write_text(
            f'FROM {TEST_IMAGE_TAG}\nLABEL rtvi.test.unique="{time.time_ns()}"\n')
        built, _ = docker_client.images.build(path=context, rm=True)
    built.tag("rtvi-airgap", "1")
    archive = tmp_path / "rt-vlm.tar"
    with archive.open("wb") as out:
        for chunk in built.save(named=True):
            out.write(chunk)
    docker_client.images.remove(built.id, force=True)
    image = f"rtvi-airgap@{built.id}"
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", image, free_port()), host=False)
    (specs / "host.yaml").write_text(json.dumps({**HOST, "spec": {
        **HOST["spec"], "images": {"archives": [str(archive)]}}}))  # type: ignore[dict-item]
    plan = cli("plan", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"load image {image}" in plan.stdout
    assert f"from archive {archive}" in plan.stdout
    done = cli("apply", str(specs), "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert containers_of(docker_client, instance)[0].image.id == built.id
    elsewhere = tmp_path.parent / "outside-trust.toml"
    elsewhere.write_text("[read]\nimages = [\"/nonexistent\"]\n")
    refused = cli("--trust", str(elsewhere), "validate", str(specs))
    assert refused.returncode == 1
    assert "outside the folders images may be read from" in refused.stdout + refused.stderr


def test_an_interrupted_pull_keeps_the_old_service_and_resumes(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        instance: str, tmp_path: Path) -> None:
    """A 48 MiB layer over a slow link (a relay at 12 MB/s in front of the registry): the link
    cut mid-pull (apply is printing bytes) leaves the old service serving, Degraded with the
    registry's reason once no byte came for the stall limit (4 s here); with it back, a
    daemon killed with -9 mid-pull leaves no image behind, and the next daemon brings it and
    converges."""
    small = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "small")
    large = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "large", random_mib=48)
    link = SlowLink(("127.0.0.1", registry.port), rate=12e6)
    address = registry.trust_at(link.port)
    name = f"{address}/{REPO}"
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "host.yaml").write_text(json.dumps(_host(registry, server=address)))
    port = free_port()
    write(specs, deployment("vlm", f"{name}@{small}", port), host=False)
    cli.extra_env.update({"NGC_API_KEY": registry.password, "PYTHONUNBUFFERED": "1",
                          STALL_ENV: "4"})  # given up 4 s after the last byte
    assert cli("apply", str(specs), "--timeout", "120").returncode == 0
    old = containers_of(docker_client, instance)[0].id
    write(specs, deployment("vlm", f"{name}@{large}", port), host=False)

    apply = cli.popen("apply", str(specs), "--timeout", "120")
    assert apply.stderr is not None
    seen = []
    for line in apply.stderr:  # progress lines: the link goes once bytes have come
        seen.append(line)
        if "pulling" in line and " of " in line and not line.split(": ")[-1].startswith("0.0"):
            link.cut()
            break
    out, err = apply.communicate(timeout=120)
    assert apply.returncode == 1, "".join(seen) + out + err
    degraded = condition(status(cli, "vlm"), "Degraded")
    assert degraded["reason"] == "PullFailed", degraded
    assert "the registry stopped answering mid-pull" in degraded["message"]
    assert containers_of(docker_client, instance)[0].id == old
    ready = httpx.get(f"http://127.0.0.1:{port}/v1/health/ready", timeout=5)
    assert ready.status_code == 200

    link.restore()
    daemon = cli.popen("run", "--specs", str(specs), "--metrics-address", "off")

    def pulling() -> bool | None:
        done = cli("status", "vlm", "-o", "json")
        if done.returncode != 0:
            return None
        progressing = [c for c in json.loads(done.stdout)["conditions"]
                       if c["type"] == "Progressing"]
        return True if progressing and progressing[0]["reason"] == "Pulling" and (
            progressing[0]["status"] == "True") else None
    try:
        assert until(pulling, timeout_s=60, pace=0.05)
        daemon.kill()
        assert "Pulling" in cli("status").stdout  # the table says a pull is under way
        daemon.communicate(timeout=30)
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(f"{name}@{large}")
        assert containers_of(docker_client, instance)[0].id == old
        daemon = cli.popen("run", "--specs", str(specs), "--metrics-address", "off")

        def converged() -> bool | None:
            status = json.loads(cli("status", "vlm", "-o", "json").stdout)
            return True if status["facts"].get("imageDigest") == large and condition(
                status, "Ready")["status"] == "True" else None
        assert until(converged, timeout_s=180, pace=0.5), cli("events").stdout
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)
        link.cut()


def test_an_experiments_template_image_is_pulled_and_its_digest_is_in_the_manifest(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        instance: str, tmp_path: Path) -> None:
    """A canary whose template's image the Host lacks: planned with its pull, run, and the
    registry digest it ran is in the run's manifest (the image provenance the guide asks)."""
    from tests.e2e.stream_helpers import rtvi_deployment
    from tests.e2e.test_experiment import canary

    digest = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "canary")
    image = f"{registry.address}/{REPO}@{digest}"
    template = rtvi_deployment(emulator_image, free_port())
    template["spec"]["image"] = image
    specs = tmp_path / "specs"
    write(specs, _host(registry), template,
          canary("pulled-1", free_port(), streams=2, qualificationOnly=True), host=False)
    cli.extra_env["NGC_API_KEY"] = "not-the-password"
    plan = cli("plan", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"Experiment/canary: pull image {image}" in plan.stdout
    # Issue 38: a failure before the run's launch was recorded nowhere (the Experiment's act
    # bypassed the one status writer); it is recorded like any kind's, and no run is claimed.
    refused = cli("apply", str(specs), "--timeout", "60", timeout=120)
    assert refused.returncode != 0
    degraded = condition(status(cli, "Experiment/canary"), "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PullFailed"), degraded
    assert not (cli.state_dir / "evidence" / "pulled-1").exists()
    cli.extra_env["NGC_API_KEY"] = registry.password
    done = cli("apply", str(specs), "--timeout", "200", timeout=260)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((cli.state_dir / "evidence" / "pulled-1" / "manifest.json")
                          .read_text())
    assert manifest["service"]["imageDigests"] == [image]
    _no_canary(cli.state_dir, *cli.transcript, canaries=(registry.password,))
