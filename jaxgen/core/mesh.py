"""Scaling past one device with JAX's own sharding: meshes, batch and parameter sharding,
process-local data, and the multi-process launch.

Everything here is plain `jax.sharding`: a `Mesh` names the devices' axes, arrays carry a
`NamedSharding`, and `jax.jit` (inside `fit`) partitions the computation (GSPMD). The same code
runs on one device, on several devices of one process, and on many processes (hosts), where
``jax.devices()`` spans every process after `init_processes`.

Launch recipe (one process per host; two CPU processes on one machine work the same way)::

    # on every host i = 0 .. N-1 (e.g. from a SLURM batch script: srun python -m my.train)
    export JAX_COORDINATOR_ADDRESS=host0:1234   # host and free port of process 0
    export JAX_NUM_PROCESSES=N JAX_PROCESS_ID=i # not needed under SLURM (auto-detected)
    python -m my.train

    # my/train.py
    from jaxgen.core import init_processes, data_mesh, sharded_minibatches, fit
    init_processes()                       # before anything touches a device
    mesh = data_mesh()                     # every device of every process
    local = load_my_rows(jax.process_index(), jax.process_count())  # this host's rows only
    batches = sharded_minibatches(local, batch_size, mesh=mesh, process_local=True)
    fit(loss, model, batches, optimizer, mesh=mesh, checkpoint_dir=shared_dir, ...)

Every process runs the same script; each feeds only its own rows, process 0 alone writes the
checkpoints (to a directory every process can read) and every process resumes from them.
"""

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec
from jaxtyping import PRNGKeyArray, PyTree

DATA_AXIS = "data"
FSDP_AXIS = "fsdp"
#: Arrays with fewer elements than this stay replicated under `fsdp_rule` (biases, norms,
#: scalars): sharding them saves little memory and costs a collective each.
FSDP_MIN_SIZE = 4096

ShardingRule = Callable[[tuple[Any, ...], jax.Array], PartitionSpec | None]


def init_processes(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Join a multi-process (multi-host) run: `jax.distributed.initialize` with CPU collectives.

    Call it once per process, first thing (before any device is used). Arguments left ``None``
    are read from the environment variables ``JAX_COORDINATOR_ADDRESS`` (``host:port`` of
    process 0), ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``; when those are unset too, JAX
    detects them on SLURM, Open MPI and Kubernetes clusters. On CPU the cross-process
    collectives go through gloo, JAX's default ``jax_cpu_collectives_implementation`` (the
    library never changes JAX's configuration; set it in your script for another one);
    accelerators use their own (NCCL, ICI). The whole launch recipe is in `data_mesh`.
    """
    coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if num_processes is None and "JAX_NUM_PROCESSES" in os.environ:
        num_processes = int(os.environ["JAX_NUM_PROCESSES"])
    if process_id is None and "JAX_PROCESS_ID" in os.environ:
        process_id = int(os.environ["JAX_PROCESS_ID"])
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
    )


def data_mesh(devices: Sequence[jax.Device] | None = None, *, fsdp: int = 1) -> Mesh:
    """A device mesh for data parallelism, optionally with a parameter-sharding axis.

    Args:
        devices: the devices (default ``jax.devices()``: every device of every process).
        fsdp: size of the ``"fsdp"`` axis over which `fsdp_rule` shards parameters and optimiser
            state. ``1`` (default) gives the 1-D mesh ``("data",)``; otherwise the 2-D mesh
            ``("data", "fsdp")`` of shape ``(len(devices) // fsdp, fsdp)``.

    Returns:
        The mesh. Batches are split over all its axes (every device sees distinct rows).

    Multi-process (multi-host) launch: run the same script once per host, with

    - ``JAX_COORDINATOR_ADDRESS=host0:PORT`` (process 0's address and a free port),
      ``JAX_NUM_PROCESSES=N`` and ``JAX_PROCESS_ID=i`` in process ``i``'s environment (under
      SLURM, ``srun python -m my.train`` with one task per host, these may be left unset);
    - on CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=K`` for ``K`` devices per
      process;
    - `init_processes` called first in the script, then ``mesh = data_mesh()`` (every device of
      every process), ``sharded_minibatches(rows, batch_size, mesh=mesh, process_local=True)``
      over this process's rows only, and ``fit(..., mesh=mesh, checkpoint_dir=shared_dir)``:
      process 0 writes the checkpoints, every process resumes from them.

    Example::

        # on host i of N:
        # JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=N JAX_PROCESS_ID=i python -m my.train
        init_processes()
        mesh = data_mesh()
        rows = load_rows(jax.process_index(), jax.process_count())
        batches = sharded_minibatches(rows, 256, mesh=mesh, process_local=True)
        result = fit(loss, model, batches, optimizer, num_steps=10_000, key=key, mesh=mesh)
    """
    devices = jax.devices() if devices is None else list(devices)
    if isinstance(fsdp, bool) or not isinstance(fsdp, int) or fsdp < 1 or len(devices) % fsdp:
        raise ValueError(
            f"`fsdp` must be an int >= 1 dividing the {len(devices)} devices, got {fsdp!r}."
        )
    if fsdp == 1:
        return Mesh(np.asarray(devices), (DATA_AXIS,))
    return Mesh(np.asarray(devices).reshape(-1, fsdp), (DATA_AXIS, FSDP_AXIS))


def _batch_spec(mesh: Mesh, ndim: int) -> PartitionSpec:
    axes = tuple(mesh.axis_names)
    return PartitionSpec(axes if len(axes) > 1 else axes[0], *([None] * (ndim - 1)))


def shard_batch(batch: PyTree, mesh: Mesh) -> PyTree:
    """Constrain every array of ``batch`` to be split along its leading axis over ``mesh``.

    The leading axis is split over all mesh axes together (for a 1-D mesh: ``"data"``). Used
    inside a jitted step; the leading (batch) axis must be divisible by the mesh size.
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
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, _batch_spec(mesh, x.ndim)))

    return jax.tree_util.tree_map(constrain, batch)


def _put(x: Any, sharding: NamedSharding) -> Any:
    if not isinstance(x, jax.Array | np.ndarray):
        return x
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return jax.jit(lambda y: y, out_shardings=sharding)(x)
    # Every process holds the same value (same seed, same checkpoint): each places its part.
    return jax.make_array_from_callback(np.shape(x), sharding, lambda idx: np.asarray(x)[idx])


def replicate(tree: PyTree, mesh: Mesh) -> PyTree:
    """Place every array of ``tree`` on all devices of ``mesh`` (replicated)."""
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree_util.tree_map(lambda x: _put(x, sharding), tree)


def fsdp_rule(
    mesh: Mesh | AbstractMesh,
    *,
    axes: str | tuple[str, ...] | None = None,
    min_size: int = FSDP_MIN_SIZE,
    override: ShardingRule | None = None,
) -> ShardingRule:
    """The FSDP (ZeRO-3) rule: shard every large array over the mesh axes ``axes``.

    An array with at least ``min_size`` elements is split along one dimension divisible by the
    product of the sizes of ``axes``: the leading dimension when it is divisible, else the
    largest divisible one. Smaller arrays, and arrays with no divisible dimension, stay
    replicated. Each device then stores about ``1 / size`` of the large arrays; XLA gathers a
    weight where the computation needs it whole (Rajbhandari et al., 2020).

    Args:
        mesh: the device mesh (an ``AbstractMesh`` too, for planning without devices).
        axes: mesh axes to shard over (default: ``"fsdp"`` when the mesh has it, else every axis
            of the mesh).
        min_size: arrays with fewer elements stay replicated.
        override: a user rule ``(path, array) -> PartitionSpec | None`` tried first; ``None``
            from it falls back to this rule.

    Returns:
        ``rule(path, array) -> PartitionSpec`` for `param_shardings` (``path`` is a key path of
        `jax.tree_util.tree_flatten_with_path`).

    References:
        Rajbhandari, Rasley, Ruwase and He (2020), "ZeRO: memory optimizations toward training
        trillion parameter models", SC20.
    """
    if axes is None:
        axes = (FSDP_AXIS,) if FSDP_AXIS in mesh.axis_names else tuple(mesh.axis_names)
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    unknown = [a for a in axes if a not in mesh.axis_names]
    if unknown:
        raise ValueError(f"`axes` must name axes of `mesh` {mesh.axis_names}, got {unknown}.")
    size = math.prod(mesh.shape[a] for a in axes)
    spec_axes = axes if len(axes) > 1 else axes[0]

    def rule(path: tuple[Any, ...], x: jax.Array) -> PartitionSpec | None:
        if override is not None:
            spec = override(path, x)
            if spec is not None:
                return spec
        shape = np.shape(x)
        if math.prod(shape) < min_size or size == 1:
            return PartitionSpec()
        dims = [d for d in range(len(shape)) if shape[d] % size == 0]
        if not dims:
            return PartitionSpec()
        dim = 0 if 0 in dims else max(dims, key=lambda d: shape[d])
        return PartitionSpec(*[spec_axes if d == dim else None for d in range(len(shape))])

    return rule


def param_shardings(tree: PyTree, mesh: Mesh, rule: ShardingRule | None = None) -> PyTree:
    """A `NamedSharding` for every array of ``tree`` (``None`` elsewhere) from ``rule``.

    ``rule(path, array) -> PartitionSpec | None`` (``None``: replicated); default
    ``fsdp_rule(mesh)``.
    """
    rule = fsdp_rule(mesh) if rule is None else rule

    def one(path: tuple[Any, ...], x: Any) -> Any:
        if not isinstance(x, jax.Array | np.ndarray):
            return None
        spec = rule(path, x)
        return NamedSharding(mesh, PartitionSpec() if spec is None else spec)

    return jax.tree_util.tree_map_with_path(one, tree)


def shard_params(tree: PyTree, mesh: Mesh, rule: ShardingRule | None = None) -> PyTree:
    """Place the arrays of ``tree`` on ``mesh`` as `param_shardings` says (default FSDP)."""
    shardings = param_shardings(tree, mesh, rule)
    return jax.tree_util.tree_map(
        lambda x, s: x if s is None else _put(x, s),
        tree,
        shardings,
        is_leaf=lambda x: x is None,
    )


def bytes_per_device(tree: PyTree) -> int:
    """The largest number of bytes of ``tree``'s arrays that any one device stores."""
    per_device: dict[Any, int] = {}
    for x in jax.tree_util.tree_leaves(tree):
        if isinstance(x, jax.Array):
            for shard in x.addressable_shards:
                per_device[shard.device] = per_device.get(shard.device, 0) + shard.data.nbytes
        elif isinstance(x, np.ndarray):
            per_device[None] = per_device.get(None, 0) + x.nbytes
    return max(per_device.values(), default=0)


def sharded_minibatches(
    data: PyTree,
    batch_size: int,
    *,
    num_shards: int | None = None,
    mesh: Mesh | None = None,
    process_local: bool = False,
) -> Callable[[PRNGKeyArray], PyTree]:
    """A pure batch sampler whose rows are drawn where the data live, one block per shard.

    The ``N`` rows are split into ``num_shards`` contiguous blocks of ``N / num_shards`` rows.
    A batch takes ``batch_size / num_shards`` rows (with replacement) from every block, block
    ``s`` drawing with ``fold_in(key, s)``; the batch is the blocks' rows in order. With a
    ``mesh`` the data are stored split over the mesh (each device holds its blocks and draws
    from them, inside `jax.shard_map`: no row moves between devices or hosts); without one, the
    same draws are made on one device. The batches therefore do not depend on the devices: a
    run on one device equals a run on a mesh, and a multi-process run, where each process holds
    only its own rows (``process_local=True``), equals both.

    Args:
        data: pytree of arrays sharing the leading axis: all ``N`` rows, or with
            ``process_local=True`` this process's ``N / jax.process_count()`` rows (process
            ``p`` holds the ``p``-th contiguous share, i.e. the blocks of its devices).
        batch_size: rows per batch, divisible by ``num_shards``.
        num_shards: number of blocks; default the mesh size (required without a mesh). With a
            mesh it must be a multiple of the mesh size.
        mesh: the mesh the data are split over (that of `fit`).
        process_local: ``data`` are this process's rows (multi-process runs; needs ``mesh``).

    Returns:
        ``batches(key) -> pytree`` with leading axis ``batch_size``, for `fit`.
    """
    leaves = jax.tree_util.tree_leaves(data)
    if not leaves:
        raise ValueError("`data` has no arrays.")
    sizes = {np.shape(x)[0] for x in leaves}
    if len(sizes) != 1:
        raise ValueError(f"every array in `data` must share its leading axis, got sizes {sizes}.")
    (local_rows,) = sizes
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1, got {batch_size!r}.")
    devices = 1 if mesh is None else mesh.devices.size
    if num_shards is None:
        if mesh is None:
            raise ValueError("`num_shards` is required without a `mesh`.")
        num_shards = devices
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards % devices:
        raise ValueError(
            f"`num_shards` must be a multiple of the {devices} devices of `mesh`, got "
            f"{num_shards!r}."
        )
    if process_local and mesh is None:
        raise ValueError("`process_local=True` needs the `mesh` the data are split over.")
    rows = local_rows * (jax.process_count() if process_local else 1)
    if rows % num_shards or batch_size % num_shards:
        raise ValueError(
            f"the {rows} rows of `data` and `batch_size` {batch_size} must both be divisible by "
            f"`num_shards` {num_shards}."
        )
    if mesh is None:
        data = jax.tree_util.tree_map(jnp.asarray, data)
    else:
        sharding = lambda x: NamedSharding(mesh, _batch_spec(mesh, np.ndim(x)))  # noqa: E731
        if process_local:
            data = jax.tree_util.tree_map(
                lambda x: jax.make_array_from_process_local_data(sharding(x), np.asarray(x)), data
            )
        else:
            data = jax.tree_util.tree_map(lambda x: _put(x, sharding(x)), data)
    return eqx.Partial(
        _sample_blocks, data, batch_size=batch_size, num_shards=num_shards, mesh=mesh
    )


def _draw_blocks(data: PyTree, key: PRNGKeyArray, first: Any, *, per_block: int, blocks: int):
    """Rows of ``blocks`` consecutive blocks (global indices ``first + j``) of local ``data``."""
    block_rows = jax.tree_util.tree_leaves(data)[0].shape[0] // blocks

    def one(j: Any, block: PyTree) -> PyTree:
        idx = jr.randint(jr.fold_in(key, first + j), (per_block,), 0, block_rows)
        return jax.tree_util.tree_map(lambda x: x[idx], block)

    split = jax.tree_util.tree_map(lambda x: x.reshape(blocks, block_rows, *x.shape[1:]), data)
    out = jax.vmap(one)(jnp.arange(blocks), split)
    return jax.tree_util.tree_map(lambda x: x.reshape(blocks * per_block, *x.shape[2:]), out)


def _sample_blocks(
    data: PyTree, key: PRNGKeyArray, *, batch_size: int, num_shards: int, mesh: Mesh | None
) -> PyTree:
    per_block = batch_size // num_shards
    if mesh is None:
        return _draw_blocks(data, key, 0, per_block=per_block, blocks=num_shards)
    blocks = num_shards // mesh.devices.size
    axes = tuple(mesh.axis_names)
    specs = jax.tree_util.tree_map(lambda x: _batch_spec(mesh, x.ndim), data)

    def local(block_data: PyTree, key: PRNGKeyArray) -> PyTree:
        index = jax.lax.axis_index(axes if len(axes) > 1 else axes[0])
        return _draw_blocks(block_data, key, index * blocks, per_block=per_block, blocks=blocks)

    return jax.shard_map(
        local, mesh=mesh, in_specs=(specs, PartitionSpec()), out_specs=specs, check_vma=False
    )(data, key)
