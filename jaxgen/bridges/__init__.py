"""Bridges: Schrödinger bridges, h-transforms and tree-structured guided SDEs."""

from ._tree_filter import (
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
from ._tree_guided import (
    ControlNet as ControlNet,
    GuidedSample as GuidedSample,
    GuidedTree as GuidedTree,
    ImportanceSample as ImportanceSample,
    TreeKernel as TreeKernel,
    TreeSDE as TreeSDE,
    guided_sample as guided_sample,
    importance_sample as importance_sample,
    path_loss as path_loss,
    proxy_posterior_mean as proxy_posterior_mean,
    sde_proxy_from_anchors as sde_proxy_from_anchors,
    simulate_tree as simulate_tree,
    tree_guided_drift as tree_guided_drift,
)
from ._tree_topology import TreeTopology as TreeTopology
from ._tree_fit import (
    fit_nbffg as fit_nbffg,
    full_tree_loss as full_tree_loss,
    leaf_batches as leaf_batches,
)
