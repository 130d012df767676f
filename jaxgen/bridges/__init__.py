"""Bridges: Schrödinger bridges, h-transforms and tree-structured guided SDEs."""

from ._closed_form import (
    follmer_drift_gaussian as follmer_drift_gaussian,
    follmer_marginal_gaussian as follmer_marginal_gaussian,
    gaussian_eot_cross_cov as gaussian_eot_cross_cov,
    gaussian_kl as gaussian_kl,
    gaussian_sb_coupling as gaussian_sb_coupling,
    gaussian_sb_marginal as gaussian_sb_marginal,
    gaussian_sb_potential_ou as gaussian_sb_potential_ou,
    ou_bridge_moments as ou_bridge_moments,
    quadratic_terminal_law as quadratic_terminal_law,
)
from ._htransform import (
    DoobDrift as DoobDrift,
    GuidedDrift as GuidedDrift,
    doob_drift as doob_drift,
    drift_ess as drift_ess,
    guide as guide,
    guided_drift as guided_drift,
    log_h as log_h,
)
from ._likelihood import (
    log_terminal_density as log_terminal_density,
    source_bank_log_h as source_bank_log_h,
)
from ._potential import (
    AbstractClosedFormLogPotential as AbstractClosedFormLogPotential,
    AbstractLogPotential as AbstractLogPotential,
    AtomicLogPotential as AtomicLogPotential,
    BoundedMLPLogPotential as BoundedMLPLogPotential,
    GMMLogPotential as GMMLogPotential,
    QuadraticLogPotential as QuadraticLogPotential,
)
from ._quadrature import (
    Quadrature as Quadrature,
    gauss_hermite as gauss_hermite,
    monte_carlo as monte_carlo,
)
from ._reference import (
    AbstractReference as AbstractReference,
    BrownianReference as BrownianReference,
    OUReference as OUReference,
)
from ._sample import sample_bridge as sample_bridge
from ._train import (
    SBNLLLoss as SBNLLLoss,
    check_samples as check_samples,
    evaluate_nll as evaluate_nll,
    fit_log_potential as fit_log_potential,
)
from .trees import (
    AbstractKernelResidual as AbstractKernelResidual,
    AbstractSDEControl as AbstractSDEControl,
    AbstractTreeKernel as AbstractTreeKernel,
    AbstractTreeSDE as AbstractTreeSDE,
    Canonical as Canonical,
    ControlNet as ControlNet,
    GuidedSample as GuidedSample,
    GuidedTree as GuidedTree,
    ImportanceSample as ImportanceSample,
    LinearKernels as LinearKernels,
    LinearSDEs as LinearSDEs,
    ResidualFlow as ResidualFlow,
    TreeFilter as TreeFilter,
    TreeKernel as TreeKernel,
    TreeSDE as TreeSDE,
    TreeTopology as TreeTopology,
    backward_filter as backward_filter,
    dense_tree_smoother as dense_tree_smoother,
    fit_nbffg as fit_nbffg,
    full_tree_loss as full_tree_loss,
    fuse as fuse,
    guided_sample as guided_sample,
    guiding_grid as guiding_grid,
    importance_sample as importance_sample,
    leaf_batches as leaf_batches,
    leaf_message as leaf_message,
    lg_sde_to_discrete as lg_sde_to_discrete,
    log_evidence as log_evidence,
    log_potential as log_potential,
    path_loss as path_loss,
    proxy_posterior_mean as proxy_posterior_mean,
    pullback as pullback,
    sde_proxy_from_anchors as sde_proxy_from_anchors,
    simulate_tree as simulate_tree,
    stratified_leaf_batches as stratified_leaf_batches,
)
