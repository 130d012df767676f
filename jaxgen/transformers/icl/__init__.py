"""In-context regression on mixtures of manifolds: tasks, classical estimators, attention models."""

from ._attention import (
    AbstractICLRegressor as AbstractICLRegressor,
    FourierLift as FourierLift,
    LinearAttentionICL as LinearAttentionICL,
    LinearSelfAttention as LinearSelfAttention,
    SoftmaxICL as SoftmaxICL,
    TwoStageConstruction as TwoStageConstruction,
    icl_loss as icl_loss,
)
from ._estimators import (
    bayes_predict as bayes_predict,
    bayes_risk as bayes_risk,
    gaussian_weights as gaussian_weights,
    kernel_ridge_predict as kernel_ridge_predict,
    knn_predict as knn_predict,
    local_pca_tangent as local_pca_tangent,
    local_poly_predict as local_poly_predict,
    nadaraya_watson as nadaraya_watson,
    rate_exponent as rate_exponent,
    ridge_predict as ridge_predict,
)
from ._tasks import (
    ICLBatch as ICLBatch,
    ICLTask as ICLTask,
    ManifoldPiece as ManifoldPiece,
    num_pieces as num_pieces,
    prior_features as prior_features,
    prior_kernel as prior_kernel,
    sample_mixture as sample_mixture,
    sample_task as sample_task,
    task_batch as task_batch,
)
