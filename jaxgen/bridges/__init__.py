"""Bridges: Schrödinger bridges, h-transforms and tree-structured guided SDEs."""

from ._closed_form import (
    follmer_drift_gaussian as follmer_drift_gaussian,
)
from ._closed_form import (
    follmer_marginal_gaussian as follmer_marginal_gaussian,
)
from ._closed_form import (
    gaussian_eot_cross_cov as gaussian_eot_cross_cov,
)
from ._closed_form import (
    gaussian_kl as gaussian_kl,
)
from ._closed_form import (
    gaussian_sb_coupling as gaussian_sb_coupling,
)
from ._closed_form import (
    gaussian_sb_marginal as gaussian_sb_marginal,
)
from ._closed_form import (
    gaussian_sb_potential_ou as gaussian_sb_potential_ou,
)
from ._closed_form import (
    ou_bridge_moments as ou_bridge_moments,
)
from ._closed_form import (
    quadratic_terminal_law as quadratic_terminal_law,
)
from ._htransform import (
    DoobDrift as DoobDrift,
)
from ._htransform import (
    GuidedDrift as GuidedDrift,
)
from ._htransform import (
    doob_drift as doob_drift,
)
from ._htransform import (
    drift_ess as drift_ess,
)
from ._htransform import (
    guide as guide,
)
from ._htransform import (
    guided_drift as guided_drift,
)
from ._htransform import (
    log_h as log_h,
)
from ._likelihood import (
    log_terminal_density as log_terminal_density,
)
from ._likelihood import (
    source_bank_log_h as source_bank_log_h,
)
from ._potential import (
    AbstractClosedFormLogPotential as AbstractClosedFormLogPotential,
)
from ._potential import (
    AbstractLogPotential as AbstractLogPotential,
)
from ._potential import (
    AtomicLogPotential as AtomicLogPotential,
)
from ._potential import (
    BoundedMLPLogPotential as BoundedMLPLogPotential,
)
from ._potential import (
    GMMLogPotential as GMMLogPotential,
)
from ._potential import (
    QuadraticLogPotential as QuadraticLogPotential,
)
from ._quadrature import (
    Quadrature as Quadrature,
)
from ._quadrature import (
    gauss_hermite as gauss_hermite,
)
from ._quadrature import (
    monte_carlo as monte_carlo,
)
from ._reference import (
    AbstractReference as AbstractReference,
)
from ._reference import (
    BrownianReference as BrownianReference,
)
from ._reference import (
    OUReference as OUReference,
)
from ._sample import sample_bridge as sample_bridge
from ._train import (
    SBNLLLoss as SBNLLLoss,
)
from ._train import (
    check_samples as check_samples,
)
from ._train import (
    evaluate_nll as evaluate_nll,
)
from ._train import (
    fit_log_potential as fit_log_potential,
)
from ._tree_filter import (
    Canonical as Canonical,
)
from ._tree_filter import (
    LinearKernels as LinearKernels,
)
from ._tree_filter import (
    LinearSDEs as LinearSDEs,
)
from ._tree_filter import (
    TreeFilter as TreeFilter,
)
from ._tree_filter import (
    backward_filter as backward_filter,
)
from ._tree_filter import (
    dense_tree_smoother as dense_tree_smoother,
)
from ._tree_filter import (
    fuse as fuse,
)
from ._tree_filter import (
    guiding_grid as guiding_grid,
)
from ._tree_filter import (
    leaf_message as leaf_message,
)
from ._tree_filter import (
    lg_sde_to_discrete as lg_sde_to_discrete,
)
from ._tree_filter import (
    log_evidence as log_evidence,
)
from ._tree_filter import (
    log_potential as log_potential,
)
from ._tree_filter import (
    pullback as pullback,
)
from ._tree_fit import (
    fit_nbffg as fit_nbffg,
)
from ._tree_fit import (
    full_tree_loss as full_tree_loss,
)
from ._tree_fit import (
    leaf_batches as leaf_batches,
)
from ._tree_guided import (
    ControlNet as ControlNet,
)
from ._tree_guided import (
    GuidedSample as GuidedSample,
)
from ._tree_guided import (
    GuidedTree as GuidedTree,
)
from ._tree_guided import (
    ImportanceSample as ImportanceSample,
)
from ._tree_guided import (
    ResidualFlow as ResidualFlow,
)
from ._tree_guided import (
    TreeKernel as TreeKernel,
)
from ._tree_guided import (
    TreeSDE as TreeSDE,
)
from ._tree_guided import (
    guided_sample as guided_sample,
)
from ._tree_guided import (
    importance_sample as importance_sample,
)
from ._tree_guided import (
    path_loss as path_loss,
)
from ._tree_guided import (
    proxy_posterior_mean as proxy_posterior_mean,
)
from ._tree_guided import (
    sde_proxy_from_anchors as sde_proxy_from_anchors,
)
from ._tree_guided import (
    simulate_tree as simulate_tree,
)
from ._tree_topology import TreeTopology as TreeTopology
