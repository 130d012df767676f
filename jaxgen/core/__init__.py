"""Core of jaxgen: types, result flags, the ODE/SDE layer, iteration, training, sharding."""

from ._iterate import IterateOutput as IterateOutput
from ._iterate import iterate as iterate
from ._linalg import psd_sqrt as psd_sqrt
from ._results import RESULTS as RESULTS
from .checkpoint import (
    latest_checkpoint as latest_checkpoint,
)
from .checkpoint import (
    load_checkpoint as load_checkpoint,
)
from .checkpoint import (
    save_checkpoint as save_checkpoint,
)
from .mesh import data_mesh as data_mesh
from .mesh import replicate as replicate
from .mesh import shard_batch as shard_batch
from .solve import solve_ode as solve_ode
from .solve import solve_sde as solve_sde
from .train import (
    FitResult as FitResult,
)
from .train import (
    adamw_cosine as adamw_cosine,
)
from .train import (
    fit as fit,
)
from .train import (
    make_step as make_step,
)
from .train import (
    minibatches as minibatches,
)
from .train import (
    train_step as train_step,
)
