"""A Deployment's image on its Host: there already, or how it gets there (pull or load).

Asked by the Deployment's plan and by an Experiment's (its run's copy of a template): the
image the spec names, looked up under its own name and, for a Host with a mirror, under the
mirror's; absent, it is pulled (or loaded from an archive the Host lists). A tag (allowed in
``exploration`` only) is asked of its registry at most every ``TAG_CHECK_S``, and only for an
image that came from a registry (one built on the Host has no digest to compare): a tag that
moved there is pulled again, with a cause naming both digests.
"""

from __future__ import annotations

from dataclasses import dataclass

from controllers.clients.docker_client import ImageInfo
from controllers.kinds.host.hostview import HostView
from controllers.kinds.host.pulls import ImageNeed, Pulls, need_for
from controllers.kinds.host.session import HostSession
from specs.images import ImageRef, parse_image, source_of
from specs.models import Deployment
from specs.trust import enforced


@dataclass(frozen=True)
class HostImage:
    image: ImageInfo | None  # None: not on the Host
    need: ImageNeed | None  # what bringing it (again) takes
    digest: str  # the registry digest the Host holds it under ("": none)


def host_image(dep: Deployment, session: HostSession, view: HostView,
               pulls: Pulls | None) -> HostImage:
    ref = parse_image(dep.spec.image)
    host = session.host.spec
    source = source_of(host, ref)
    names = list(dict.fromkeys((ref.text, source.text)))
    engine = session.engine()
    image = next((found for name in names if (found := view.image(name)) is not None), None)
    image = image or next((found for name in names if (found := engine.image(name))), None)
    digest = repo_digest(source, image) or repo_digest(ref, image)
    if image is None:
        return HostImage(None, need_for(ref, host, session.name,
                                        f"it is not on Host {session.name}"), "")
    if ref.digest is not None or not digest or pulls is None:
        return HostImage(image, None, digest)
    now = pulls.tag_digest(session, need_for(ref, host, session.name, ""))
    if now is None or now == digest:
        return HostImage(image, None, digest)
    return HostImage(image, need_for(ref, host, session.name, f"tag {ref.text} moved in "
                                     f"{source.registry}: {digest} → {now}"), digest)


def repo_digest(ref: ImageRef, image: ImageInfo | None) -> str:
    """The registry digest the Host holds ``ref``'s image under ("" when it has none: an
    image built or loaded there)."""
    if image is None:
        return ""
    if ref.digest is not None and ref.digest_ref(ref.digest) in image.repo_digests:
        return ref.digest
    return next((d.partition("@")[2] for d in image.repo_digests
                 if d.startswith(ref.name + "@")), "")


def pull_refused(need: ImageNeed) -> str | None:
    """Why the operator's trust refuses this pull (an archive's folder was judged when the
    spec was read; a registry is judged here, where the pull is decided)."""
    policy = enforced()
    if policy is None or need.archive is not None:
        return None
    return policy.refused_pull(need.image.registry)
