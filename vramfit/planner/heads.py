"""What the model's output layer computes for the task a run trains: the tensors its loss holds, and how many sequences
one sample brings into the forward.

A causal LM writes vocabulary-wide logits at every position. The tasks below never do:

- `seq_cls` / `token_cls` (transformers modeling_layers.py `GenericForSequenceClassification` /
  `GenericForTokenClassification`): a `score` Linear(hidden, num_labels) in place of lm_head (training.with_head);
  sequence classification keeps the last non-pad position's [batch, num_labels] (`pooled_logits`). TRL's
  RewardTrainer (num_labels=1), ms-swift `--task_type seq_cls`, `--rlhf_type rm` (swift/arguments/rlhf_args.py
  `_init_rm`: task_type seq_cls, num_labels 1, since ms-swift v3.0.2) and `--task_type reranker`
  (swift/model/register.py `get_model`: "patch CausalLM to SequenceClassification with num_labels=1").
- `embedding` (ms-swift `--task_type embedding`): swift/model/register.py `get_model` loads the causal LM
  (AutoModelForCausalLM, e.g. qwen3_emb's `Qwen3ForCausalLM`) and `patch_output_normalizer` (swift/model/patcher.py)
  replaces the lm_head's forward with `return hidden_states`: the "logits" are the final norm's output itself, no new
  tensor. A forward hook takes each sequence's last valid position (`hidden_states[arange, sequence_lengths]`) and
  L2-normalises it: [sequences, hidden]. The loss (swift/loss/embedding.py InfonceLoss and the pair losses) works on
  those pooled rows: similarity matrices of [anchors x documents] across the data-parallel ranks, a few MB. The
  backward of the pooling index writes a dense [sequences, seq, hidden] gradient of the hidden states (aten index
  backward: zeros, then index_put). The lm_head weight is never read, so it gets no gradient.
- `generative_reranker` (ms-swift `--task_type generative_reranker`, Qwen3-Reranker): `_patch_generative_reranker`
  (swift/model/register.py) replaces the lm_head's forward with swift/utils/torch_utils.py
  `get_generative_reranker_logits`: `weight = lm_head_weight[[yes_id, no_id]]`, `F.linear(hidden_states, weight)`
  ([sequences, seq, 2]) and `logits[..., 0:1] - logits[..., 1:2]` ([sequences, seq, 1]) at every position; the
  RerankerTrainer (swift/trainers/reranker_trainer.py) keeps the last valid position's score. Three columns per
  position, not the vocabulary; the backward of the row index writes a dense vocab x hidden gradient of lm_head's
  weight when it trains.

Sequences per sample (ms-swift swift/template/base.py): an embedding sample is encoded as anchor, positive and each of
its hard negatives (`_embedding_encode`), all collated into one batch (`_embedding_data_collator`): 2 + negatives
sequences. A reranker sample (`_reranker_data_collator`) becomes, for each of up to MAX_POSITIVE_SAMPLES positives, that
positive and up to MAX_NEGATIVE_SAMPLES negatives: positives x (1 + negatives) sequences, "placed in the same batch"
(docs/source_en/BestPractices/Reranker.md). Evaluation encodes in the same training mode (`Template.is_training` is
true for mode 'train'), so its batches are grouped alike.
"""

from __future__ import annotations

from dataclasses import dataclass

# ms-swift swift/template/base.py `_reranker_data_collator`: os.environ MAX_POSITIVE_SAMPLES (default 1),
# MAX_NEGATIVE_SAMPLES (default 7); docs/source_en/BestPractices/Reranker.md states the same defaults.
RERANKER_POSITIVES = 1
RERANKER_NEGATIVES = 7
# columns per position of the generative reranker's output: F.linear over the yes / no rows (2), then their difference (1)
GENERATIVE_RERANKER_COLUMNS = 3
# ms-swift ModelArguments.task_type values (swift/arguments/base_args/model_args.py) and the head each builds
SWIFT_TASKS = {
    "causal_lm": "lm",
    "seq_cls": "seq_cls",
    "embedding": "embedding",
    "reranker": "seq_cls",
    "generative_reranker": "generative_reranker",
}
RERANKER_TASKS = ("reranker", "generative_reranker")


@dataclass(frozen=True)
class Output:
    """The output layer's tensors, per position and per sequence."""

    width: int  # columns it writes at every position (the logits' last dimension; 0: none, the hidden state itself)
    weight_rows: int  # rows of its weight whose gradient its backward writes when it trains (0: the weight is not read)
    kept: int  # columns per kept row an evaluation loop keeps for metrics
    per_token: bool  # the loss and the kept predictions are per position (lm, token_cls), else one row per sequence


def output(setup, arch) -> Output:
    """The output layer of `setup.head` over `arch` (training.with_head's: a classification head's vocab is num_labels)."""
    head = getattr(setup, "head", "lm")
    if head == "embedding":
        return Output(0, 0, arch.text.hidden, False)
    if head == "generative_reranker":
        return Output(GENERATIVE_RERANKER_COLUMNS, arch.vocab, 1, False)
    return Output(arch.vocab, arch.vocab, arch.vocab, head != "seq_cls")


def sequences_per_sample(head: str, task: str | None, negatives: int | None, positives: int | None) -> tuple[int, str]:
    """(sequences one sample brings into the forward, what they are) for an embedding or reranker task; (1, "") else."""
    if head == "embedding":
        n = negatives or 0
        return 2 + n, f"anchor + positive + {n} hard negative{'s' if n != 1 else ''}"
    if head == "generative_reranker" or task in RERANKER_TASKS:
        p = RERANKER_POSITIVES if positives is None else positives
        n = RERANKER_NEGATIVES if negatives is None else negatives
        return p * (1 + n), f"{p} positive{'s' if p != 1 else ''} x (itself + {n} negative{'s' if n != 1 else ''})"
    return 1, ""


NOTES = {
    "embedding": (
        "embedding head (ms-swift patch_output_normalizer): lm_head returns the hidden states as they are, the last "
        "token's is pooled and normalised; no vocabulary-wide logits"
    ),
    "generative_reranker": (
        "generative reranker head (ms-swift get_generative_reranker_logits): lm_head's yes / no rows only, 3 columns per position; no vocabulary-wide logits"
    ),
}


def note(setup, seq: int) -> str:
    """The plan's note on the task's head and its sequences per sample."""
    parts = [NOTES[setup.head]] if setup.head in NOTES else []
    if setup.sequences_what:
        parts.append(
            f"{setup.sequences_per_sample} sequences per sample in one forward ({setup.sequences_what}): "
            f"{setup.sequences_per_sample} x {setup.micro_batch} sequences of up to {seq} tokens"
        )
    return "; ".join(parts)
