"""Small language models on `jaxgen.nn.Transformer`: next-token loss, training through
`jaxgen.core.fit`, held-out bits per token / perplexity, sampling, sequence scoring and
generative perplexity.
"""

from ._icl_attention import (
    AbstractICLRegressor as AbstractICLRegressor,
    FourierLift as FourierLift,
    LinearAttentionICL as LinearAttentionICL,
    LinearSelfAttention as LinearSelfAttention,
    SoftmaxICL as SoftmaxICL,
    TwoStageConstruction as TwoStageConstruction,
    icl_loss as icl_loss,
)
from ._icl_estimators import (
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
from ._icl_tasks import (
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
from ._lm import (
    AUX_LOSS_WEIGHT as AUX_LOSS_WEIGHT,
    LMEvaluation as LMEvaluation,
    evaluate_lm as evaluate_lm,
    generative_perplexity as generative_perplexity,
    lm_loss as lm_loss,
    lm_optimizer as lm_optimizer,
    sample_lm as sample_lm,
    score_sequences as score_sequences,
    sequence_log_prob as sequence_log_prob,
    token_nll as token_nll,
    train_lm as train_lm,
)
from ._qes import (
    LoRALinear as LoRALinear,
    MoLoRALinear as MoLoRALinear,
    QESConfig as QESConfig,
    TokenRouter as TokenRouter,
    route_loss as route_loss,
    shutdown_mask as shutdown_mask,
    switch_load_loss as switch_load_loss,
    trim_suspects as trim_suspects,
)
from ._qes_data import (
    PRETRAIN_TASKS as PRETRAIN_TASKS,
    PRETRAIN_VOCAB_SIZE as PRETRAIN_VOCAB_SIZE,
    BackdoorVocab as BackdoorVocab,
    clean_test_set as clean_test_set,
    make_pretrain_tasks as make_pretrain_tasks,
    make_task as make_task,
    poison as poison,
    triggered_test_set as triggered_test_set,
)
from ._qes_eval import (
    attack_success_rate as attack_success_rate,
    clean_accuracy as clean_accuracy,
    greedy_decode as greedy_decode,
    lm_tokens as lm_tokens,
    routing_auroc as routing_auroc,
)
from ._qes_model import (
    QESTransformer as QESTransformer,
    attach_lora as attach_lora,
    attach_qes as attach_qes,
    restore as restore,
    shutdown as shutdown,
    trainable_filter as trainable_filter,
)
from ._qes_train import (
    abl_train as abl_train,
    adapter_optimizer as adapter_optimizer,
    adapter_task_loss as adapter_task_loss,
    backdoor_batches as backdoor_batches,
    fine_prune as fine_prune,
    full_finetune as full_finetune,
    qes_loss as qes_loss,
    sample_losses as sample_losses,
    suspect_recall as suspect_recall,
    train_qes as train_qes,
)
