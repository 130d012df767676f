"""Neural-network building blocks: constrained ReLU networks (ICNN, ReLU+), exact constructions."""

from ._icnn import (
    ICNN as ICNN,
    NonNegProjectionState as NonNegProjectionState,
    ReLUNet as ReLUNet,
    ReLUPlusNet as ReLUPlusNet,
    check_constraints as check_constraints,
    nonneg_projection as nonneg_projection,
    project_nonneg as project_nonneg,
)
from ._icnn_exact import (
    SEPARATION_FAMILIES as SEPARATION_FAMILIES,
    icnn_max_affine_exact as icnn_max_affine_exact,
    icnn_max_exact as icnn_max_exact,
    icnn_separation_exact as icnn_separation_exact,
    lattice_points as lattice_points,
    max_affine as max_affine,
    max_n as max_n,
    relu_max_tree as relu_max_tree,
    separation_fk as separation_fk,
)
from ._monotone import (
    BoxSampler as BoxSampler,
    convexity_gap as convexity_gap,
    corner_floor as corner_floor,
    corner_points as corner_points,
    fit_on_box as fit_on_box,
    monotonicity_gap as monotonicity_gap,
    sup_error as sup_error,
    squared_error_loss as squared_error_loss,
    supermodularity_gap as supermodularity_gap,
)
