"""Monte Carlo over the devices of a mesh: replicate axes sharded with `jax.jit` + `NamedSharding`.

The simulation-heavy entry points of jaxgen (confidence-sequence coverage over replicates,
srGW over a batch of graphs, particle batches of the tree samplers, many samples of a flow)
map one function over a leading replicate axis. `sharded_vmap` runs that map with the
replicate axis split across every device of a `jax.sharding.Mesh` (all its axes flattened), so
each device computes its own block of replicates; the result equals the one-device
``jax.vmap`` up to float round-off (each replicate runs the same operations). Without a mesh it
is ``jax.jit(jax.vmap(fn))``.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.random as jr
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import PRNGKeyArray, PyTree

from .checks import check_key, check_positive_int


def replicate_sharding(mesh: Mesh) -> NamedSharding:
    """The sharding of a leading replicate axis over every device of ``mesh``."""
    return NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))


def sharded_vmap(fn: Callable[..., Any], mesh: Mesh | None = None) -> Callable[..., Any]:
    """``jax.vmap(fn)`` over the leading axis of every argument, that axis split over ``mesh``.

    Args:
        fn: a function of one replicate (one key, one graph, one data set, ...).
        mesh: a device mesh; the leading axis of every argument and output is sharded over all
            of its devices (its size must be a multiple of ``mesh.size``). ``None``: one device.

    Returns:
        ``mapped(*batched_args)``, jitted: the outputs stacked along a leading axis, sharded
        like the inputs when a mesh is given.

    Raises:
        ValueError: when the replicate axis is not a multiple of the number of devices.
    """
    mapped = jax.jit(jax.vmap(fn))
    if mesh is None:
        return mapped
    sharding = replicate_sharding(mesh)
    sharded = jax.jit(jax.vmap(fn), in_shardings=sharding, out_shardings=sharding)

    def run(*args: PyTree) -> PyTree:
        sizes = {x.shape[0] for x in jax.tree_util.tree_leaves(args) if hasattr(x, "shape")}
        if len(sizes) != 1:
            raise ValueError(
                f"every argument must have the same leading (replicate) size, got {sorted(sizes)}."
            )
        (size,) = sizes
        if size % mesh.size:
            raise ValueError(
                f"the replicate axis ({size}) must be a multiple of the mesh's {mesh.size} devices."
            )
        return sharded(*jax.device_put(args, sharding))

    return run


def sample_many(
    key: PRNGKeyArray,
    sample_fn: Callable[[PRNGKeyArray], PyTree],
    num_samples: int,
    *,
    mesh: Mesh | None = None,
) -> PyTree:
    """``num_samples`` independent draws of ``sample_fn(key) -> sample``, stacked.

    Draw ``i`` uses ``jax.random.split(key, num_samples)[i]`` with or without a mesh, so the
    samples do not depend on the number of devices.

    Args:
        key: PRNG key.
        sample_fn: one draw from one key (e.g. ``lambda k: ntm.sample(k, ts)[0]``).
        num_samples: how many draws (a multiple of ``mesh.size`` when a mesh is given).
        mesh: shard the draws over this mesh's devices (`sharded_vmap`).

    Returns:
        The draws with a leading axis of length ``num_samples``.
    """
    key = check_key(key)
    num_samples = check_positive_int(num_samples, "num_samples")
    return sharded_vmap(sample_fn, mesh)(jr.split(key, num_samples))
