"""Is a Deployment's host port free? Judged at plan time, wherever it can be seen cheaply.

A taken port otherwise shows only when the replacement container starts, after the working
one was stopped. Two things can be seen before anything changes:

- another running container (ours or foreign) publishing the port: one list call to the
  engine, on every Host;
- any process listening on the port: a test bind on this machine, so only for a local engine
  (``unix://``). For an SSH Host nothing is said: seeing it would cost a remote command.

This resource's own container is never a holder: a running service is in sync, not in the way.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Sequence

from controllers import ownership
from controllers.clients.docker_client import ContainerInfo, PortHolder

WILDCARD_ADDRESSES = frozenset({"", "0.0.0.0", "::"})
HOST_NETWORK = "host"


def port_holders(published_ports: Sequence[PortHolder], address: str, port: int,
                 own_names: set[str], own: ContainerInfo | None, local: bool) -> list[str]:
    """Who holds ``address:port`` on the Host, described for a person; [] if free as far as
    we can see. ``published_ports``: what containers there publish (``HostView.published``);
    ``own_names``: this resource's container names (final and staged)."""
    published = [h for h in published_ports if h.port == port]
    holders = [_describe(h) for h in published
               if h.container not in own_names and _overlap(h.address, address)]
    if holders or not local:
        return holders
    # Ours holds it when it publishes it, or shares the Host's network while it runs or is
    # paused (a paused process keeps its sockets: it is Paused, not "a process on the Host").
    own_holds = any(h.container in own_names for h in published) or (
        own is not None and (own.running or own.paused) and own.network_mode == HOST_NETWORK)
    if not own_holds and _in_use(address, port):
        return [f"a process on the Host listens on {_show(address)}:{port}"]
    return []


def _describe(holder: PortHolder) -> str:
    labels = holder.labels
    if labels.get(ownership.LABEL_MANAGED_BY) == ownership.MANAGED_BY:
        owner = (f"{labels.get(ownership.LABEL_RESOURCE, '?')} of reconciler instance "
                 f"{labels.get(ownership.LABEL_INSTANCE, '?')}")
    else:
        owner = "not managed by this reconciler"
    return (f"container {holder.container} ({owner}) publishes "
            f"{_show(holder.address)}:{holder.port}")


def _overlap(held: str, wanted: str) -> bool:
    """Two bindings clash when their addresses are equal or either is a wildcard."""
    return held in WILDCARD_ADDRESSES or wanted in WILDCARD_ADDRESSES or held == wanted


def _show(address: str) -> str:
    if not address:
        return "*"
    return f"[{address}]" if ":" in address else address


def _in_use(address: str, port: int) -> bool:
    """Whether binding ``address:port`` here fails because something holds it. SO_REUSEADDR
    lets a port that merely lingers in TIME_WAIT pass, while a listener still refuses the bind;
    any other failure (an address not on this machine, a privileged port) says nothing."""
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
