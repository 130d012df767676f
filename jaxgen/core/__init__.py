"""Core of jaxgen: types, result flags, the ODE/SDE layer, iteration, training, sharding."""

from ._iterate import IterateOutput as IterateOutput, iterate as iterate
from ._linalg import psd_sqrt as psd_sqrt
from ._mmd import (
    check_kernel as check_kernel,
    kernel_gram as kernel_gram,
    mmd2_from_grams as mmd2_from_grams,
    mmd2_unbiased as mmd2_unbiased,
    pairwise_sq_dists as pairwise_sq_dists,
)
from ._montecarlo import (
    replicate_sharding as replicate_sharding,
    sample_many as sample_many,
    sharded_vmap as sharded_vmap,
)
from ._results import RESULTS as RESULTS
from .checkpoint import (
    CheckpointWarning as CheckpointWarning,
    CorruptCheckpointError as CorruptCheckpointError,
    latest_checkpoint as latest_checkpoint,
    load_checkpoint as load_checkpoint,
    load_latest_checkpoint as load_latest_checkpoint,
    save_checkpoint as save_checkpoint,
    verify_checkpoint as verify_checkpoint,
)
from .mesh import (
    bytes_per_device as bytes_per_device,
    data_mesh as data_mesh,
    fsdp_rule as fsdp_rule,
    init_processes as init_processes,
    param_shardings as param_shardings,
    replicate as replicate,
    shard_batch as shard_batch,
    shard_params as shard_params,
    sharded_minibatches as sharded_minibatches,
)
from .solve import solve_ode as solve_ode, solve_sde as solve_sde
from .train import (
    FitResult as FitResult,
    NonFiniteError as NonFiniteError,
    adamw_cosine as adamw_cosine,
    fit as fit,
    make_step as make_step,
    minibatches as minibatches,
    train_step as train_step,
)
