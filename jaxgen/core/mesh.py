"""Data parallelism with JAX's own sharding: a 1-D device mesh and batch sharding."""

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import PyTree

DATA_AXIS = "data"


def data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: all local devices) with axis name ``"data"``.

    Multi-host runs call ``jax.distributed.initialize()`` first; ``jax.devices()`` then spans
    every host and the same mesh shards the global batch.
    """
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def shard_batch(batch: PyTree, mesh: Mesh) -> PyTree:
    """Constrain every array of ``batch`` to be split along its leading axis over ``mesh``.

    Used inside a jitted step; the leading (batch) axis must be divisible by the mesh size.
    """
    size = mesh.devices.size

    def constrain(x: jax.Array) -> jax.Array:
        if x.ndim == 0:
            return x
        if x.shape[0] % size:
            raise ValueError(
                f"batch leading axis {x.shape[0]} is not divisible by the {size} devices of "
                "`mesh`; choose a batch size that is a multiple of the device count."
            )
        spec = PartitionSpec(DATA_AXIS, *([None] * (x.ndim - 1)))
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    return jax.tree_util.tree_map(constrain, batch)


def replicate(tree: PyTree, mesh: Mesh) -> PyTree:
    """Place every array of ``tree`` on all devices of ``mesh`` (replicated)."""
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree_util.tree_map(
        lambda x: jax.device_put(x, sharding) if isinstance(x, jax.Array) else x, tree
    )
