"""Images a Deployment brought to its Host, and their removal once nothing uses them.

An image cannot carry our labels after the fact, so what the reconciler pulled or loaded is
recorded in the Deployment's inventory (kind ``image``, by the reference the Host holds it
under), written before the pull starts so a pull the daemon finishes beside the queue is
recorded too. With the Host's
``images.prune`` on, an image recorded so is removed when its Deployment moved to another
image or was deleted, and only if the engine agrees no container uses it: the removal is
never forced, so a container of anyone's keeps its image. Nothing not recorded is touched.
"""

from __future__ import annotations

from controllers.clients.docker_client import DockerEngine
from state.keys import Key
from state.models import InventoryItem, ResourceStatus, utc_now
from state.store import Store

KIND_IMAGE = "image"


def record_image(store: Store, resource: Key, host: str, name: str) -> None:
    """Remember that we bring ``name`` to ``host`` for ``resource`` (before we do)."""
    item = InventoryItem(kind=KIND_IMAGE, name=name, host=host, state="created",
                         created_at=utc_now())
    def mutate(st: ResourceStatus) -> None:
        if st.inventory_item(KIND_IMAGE, name) is None:
            st.upsert_inventory(item)
    store.update(resource, mutate)


def stale_images(record: ResourceStatus | None, keep: frozenset[str]) -> bool:
    """Whether ``record`` lists an image we brought that it no longer runs (an earlier
    removal was refused while a neighbour still used it: a steady pass tries again)."""
    return record is not None and any(i.kind == KIND_IMAGE and i.name not in keep
                                      for i in record.inventory)


def prune_images(engine: DockerEngine, store: Store, record: ResourceStatus,
                 keep: frozenset[str]) -> list[str]:
    """Remove the images ``record`` says we brought, except ``keep`` (the one it runs, and
    during a promotion's bake the one a rollback needs), that no container uses; returns
    what was removed. One still in use stays recorded."""
    removed = []
    for item in [i for i in record.inventory if i.kind == KIND_IMAGE and i.name not in keep]:
        if engine.remove_image(item.name):
            removed.append(f"image {item.name}")

            def forget(st: ResourceStatus, gone: InventoryItem = item) -> None:
                st.remove_inventory(gone.kind, gone.name)
            store.update(record.key, forget)
    return removed
