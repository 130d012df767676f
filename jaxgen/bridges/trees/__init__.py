"""Neural backward filtering forward guiding (NBFFG) on trees: topology, filter, guided SDE, fit."""

from ._filter import (
    Canonical as Canonical,
    LinearKernels as LinearKernels,
    LinearSDEs as LinearSDEs,
    TreeFilter as TreeFilter,
    backward_filter as backward_filter,
    dense_tree_smoother as dense_tree_smoother,
    fuse as fuse,
    guiding_grid as guiding_grid,
    leaf_message as leaf_message,
    lg_sde_to_discrete as lg_sde_to_discrete,
    log_evidence as log_evidence,
    log_potential as log_potential,
    pullback as pullback,
)
from ._fit import (
    fit_nbffg as fit_nbffg,
    full_tree_loss as full_tree_loss,
    leaf_batches as leaf_batches,
    stratified_leaf_batches as stratified_leaf_batches,
)
from ._guided import (
    AbstractKernelResidual as AbstractKernelResidual,
    AbstractSDEControl as AbstractSDEControl,
    AbstractTreeKernel as AbstractTreeKernel,
    AbstractTreeSDE as AbstractTreeSDE,
    ControlNet as ControlNet,
    GuidedSample as GuidedSample,
    GuidedTree as GuidedTree,
    ImportanceSample as ImportanceSample,
    ResidualFlow as ResidualFlow,
    TreeKernel as TreeKernel,
    TreeSDE as TreeSDE,
    guided_sample as guided_sample,
    importance_sample as importance_sample,
    path_loss as path_loss,
    proxy_posterior_mean as proxy_posterior_mean,
    sde_proxy_from_anchors as sde_proxy_from_anchors,
    simulate_tree as simulate_tree,
)
from ._topology import TreeTopology as TreeTopology
