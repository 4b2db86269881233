"""How long the run's samples are, where the files let the review know it, and whether that or the cap sizes a batch.

A cap (`model_max_length`, `max_length`, `cutoff_len`) is the most a sample may be. What a step holds in memory is
set by the cap only where every sample is padded to it (`padding="max_length"`) or packed up to it; a collator that
pads each batch to its longest sample holds that sample's length. The review plans at the cap unless the data's
longest sample is known, and says which:

- a sample of the dataset: the training file the script names, where it lies here (its first `SAMPLE` records);
- a published dataset whose samples are bounded by how it was made (`PUBLISHED`, each with its source).

With neither, the cap is the verdict, as before. Facts about the upstream collators are in `PADDING`, `PADDING_IF` and
LLaMA-Factory's (`_llamafactory`: each batch padded to its longest sample unless it packs to cutoff_len).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

SAMPLE = 2000  # records read from the head of a training file
# Characters per token of English text for an estimate without the model's tokenizer: OpenAI's tokenizer guide, "one
# token generally corresponds to ~4 characters of text for common English text". Rounded down to 3 for an upper bound
# of the token count (code, numbers and other languages take more tokens per character).
CHARS_PER_TOKEN = 3


@dataclass(frozen=True)
class Longest:
    tokens: int  # the longest sample's LLM tokens, image tokens included
    how: str  # where the figure comes from, said in the finding
    bound: bool  # True: no sample can be longer (a published bound); False: the longest of those read


@dataclass(frozen=True)
class Published:
    """A public training set whose sample length is bounded by how it was made."""

    images: int  # images per sample
    text_tokens: int  # an upper bound of the text's LLM tokens, the prompt template included (REACHES: no bound)
    why: str


REACHES = 2**31  # a set some of whose samples run past any cap a script sets: batches holding them reach the cap
# LLaVA README (haotian-liu/LLaVA, "--group_by_modality_length ... language (e.g. ShareGPT) and multimodal"): the v1.5
# instruction mix holds ShareGPT conversations. FastChat, through which Vicuna's ShareGPT data went, fills each segment
# with whole exchanges up to 2048 tokens and keeps an exchange longer than that whole (fastchat/data/
# split_long_conversation.py `split_one_sample`, --max-length 2048): samples reach LLaVA's 2048-token cap, some pass it.
_SHAREGPT = (
    "holds ShareGPT conversations (LLaVA README, --group_by_modality_length), which FastChat's split fills up to 2048 "
    "tokens per sample and leaves longer where one exchange is (fastchat/data/split_long_conversation.py)"
)


PUBLISHED = {
    # LLaVA docs/Data.md: "LAION/CC/SBU BLIP-Caption Concept-balanced 558K | blip_laion_cc_sbu_558k.json", one image and
    # its BLIP synthetic caption per sample; LLaVA's pretraining template 'plain' (llava/train/train.py preprocess_plain)
    # keeps only the image and the caption. BLIP's captioner stops at max_length=30 WordPiece tokens, its prompt
    # "a picture of " included (salesforce/BLIP models/blip.py BLIP_Decoder.generate). Taken here as at most 64 LLM
    # tokens with the separator: two per WordPiece token, a bound across tokenizers rather than a measurement.
    "blip_laion_cc_sbu_558k.json": Published(
        1,
        64,
        "LLaVA-Pretrain LCS-558K: one image and one BLIP caption per sample (LLaVA docs/Data.md); BLIP's captioner stops at "
        "30 WordPiece tokens (salesforce/BLIP models/blip.py), taken as at most 64 LLM tokens",
    ),
    "llava_v1_5_mix665k.json": Published(0, REACHES, f"LLaVA-v1.5's instruction mix {_SHAREGPT}"),
    # InternLM-XComposer projects/ShareGPT4V/docs/Data.md: "We replace 23K image-text pairs related to the image captioning
    # task in LLaVA-mix-665K with ..." - the rest, its ShareGPT conversations included, is LLaVA's mix
    "sharegpt4v_mix665k_cap23k_coco-ap9k_lcs3k_sam9k_div2k.json": Published(
        0, REACHES, f"ShareGPT4V's SFT mix, LLaVA-mix-665K with 23K captions replaced (ShareGPT4V docs/Data.md), {_SHAREGPT}"
    ),
}

# Upstream programs' collators: True, each batch padded to its longest sample; False, every sample padded to the cap.
PADDING: list[tuple[re.Pattern[str], bool, str]] = [
    (
        re.compile(r"(^|/)(llava|share4v|tinychart)/train/train\w*\.py$"),
        True,
        "LLaVA's DataCollatorForSupervisedDataset pads each batch to its longest sample (torch.nn.utils.rnn.pad_sequence) and "
        "truncates to model_max_length (llava/train/train.py)",
    ),
    (
        re.compile(r"(^|/)qlora\.py$"),
        True,
        "artidoro/qlora's DataCollatorForCausalLM pads each batch to its longest sample (torch.nn.utils.rnn.pad_sequence) "
        "after cutting each sample's source at source_max_len and its target at target_max_len (qlora.py)",
    ),
    (
        re.compile(r"(^|/)fastchat/train/train\w*\.py$"),
        False,
        "FastChat's preprocess pads every sample to model_max_length (padding='max_length', fastchat/train/train.py)",
    ),
    (
        re.compile(r"step1_supervised_finetuning/main\.py$"),
        False,
        "DeepSpeed-Chat pads every sample to max_seq_len (padding='max_length', dschat/utils/data/data_utils.py)",
    ),
]
PADDING.append(
    (
        re.compile(r"^litgpt$"),  # `litgpt finetune_*` (a LitGPT config: vramfit.review.litgpt)
        True,
        "LitGPT's _sft_collate_fn pads each batch to its longest sample (torch.nn.utils.rnn.pad_sequence) and truncates it to "
        "train.max_seq_length (litgpt/data/base.py)",
    )
)
# Collators that depend on the script's arguments: (program, {argument: the value with which batches are padded to their
# longest sample}, the fact when one of them is passed so, the fact otherwise: every sample padded to the cap).
PADDING_IF: list[tuple[re.Pattern[str], dict[str, str], str, str]] = [
    (
        re.compile(r"(^|/)internvl/train/internvl_chat_(finetune|pretrain)\.py$"),
        {"conv_style": "internvl2_5", "group_by_length": "true"},
        "InternVL's preprocess_internvl2_5 tokenizes with padding=False, as its other templates do under group_by_length, "
        "and concat_pad_data_collator pads each batch to its longest sample (internvl_chat/internvl/train/dataset.py, "
        "internvl/patch/pad_data_collator.py)",
        "InternVL's preprocess pads every sample to max_seq_length (padding='max_length' unless group_by_length or "
        "use_packed_ds, internvl_chat/internvl/train/dataset.py)",
    ),
]


# LLaMA-Factory (hiyouga/LLaMA-Factory), read at v0.2.0 (d627ab48, 2023-10-15), v0.5.3 (48d2e6d7), v0.6.3 (c8fe3f54),
# v0.8.0 (c0c387e4), 7f8ef8c1 (2024-11-09) and ff6d4d12 (2026-08-18), the same at each: every stage's collator is
# transformers' DataCollatorForSeq2Seq / DataCollatorWithPadding or a subclass that calls it (SFT:
# SFTDataCollatorWith4DAttentionMask, earlier DataCollatorForSeq2Seq; rm / dpo / orpo: PairwiseDataCollatorWithPadding,
# earlier DPODataCollatorWithPadding; kto: KTODataCollatorWithPadding; ppo: MultiModalDataCollatorForSeq2Seq, earlier
# DataCollatorWithPadding; pt: DataCollatorForLanguageModeling), built without `padding=` (its default True: the longest
# sample of the batch; pad_to_multiple_of 8), the samples cut at cutoff_len by the dataset processors. Packing fills
# every sequence to cutoff_len: `packing` / `neat_packing` (0.6 on; PackedSupervisedDatasetProcessor's greedy knapsack
# pads each pack to exactly cutoff_len), `sft_packing` (0.2-0.5), and pretraining (`stage: pt`), which packs its text
# into cutoff_len blocks by default (pretrain processor; hparams/parser.py: `packing` None -> stage == "pt").
LLAMAFACTORY_PROGRAM = re.compile(r"^(llamafactory-cli|lmf)$")
LLAMAFACTORY_ARGUMENTS = {"stage", "finetuning_type", "cutoff_len"}  # its own: FinetuningArguments, DataArguments
LLAMAFACTORY_LONGEST = (
    "LLaMA-Factory's collators pad each batch to its longest sample (DataCollatorForSeq2Seq's padding=True under "
    "SFTDataCollatorWith4DAttentionMask, PairwiseDataCollatorWithPadding, KTODataCollatorWithPadding: "
    "src/llamafactory/data/collator.py, train/*/workflow.py) and its dataset processors cut each sample at cutoff_len"
)
LLAMAFACTORY_PACKED = (
    "LLaMA-Factory packs the samples into sequences of exactly cutoff_len ({how}: src/llamafactory/data/processor/{processor}.py, hparams/parser.py)"
)


def _llamafactory(p: str, said: dict[str, str]) -> tuple[bool, str] | None:
    """LLaMA-Factory's padding for its arguments, where the launch is LLaMA-Factory (its CLI, or its own arguments)."""
    if not (LLAMAFACTORY_PROGRAM.search(p) or len(LLAMAFACTORY_ARGUMENTS & set(said)) >= 2):
        return None
    for switch in ("neat_packing", "packing", "sft_packing"):
        if said.get(switch) == "true":
            return False, LLAMAFACTORY_PACKED.format(how=f"{switch}: true", processor="supervised")
    if said.get("stage") == "pt" and said.get("packing") != "false":
        return False, LLAMAFACTORY_PACKED.format(how="stage: pt, where packing defaults to true", processor="pretrain")
    return True, LLAMAFACTORY_LONGEST


# axolotl (axolotl-ai-cloud/axolotl at 067b021c): core/builders/causal.py `build_collator` builds DataCollatorForSeq2Seq (or,
# with processor_type, MultiModalChatDataCollator, utils/collators/mm_chat.py) with `padding: True` and pad_to_multiple_of
# 64 unless pad_to_sequence_len, which pads to sequence_len; sample_packing (multipack, pad_to_sequence_len on) fills each
# micro-batch to sequence_len; samples past sequence_len are dropped or cut (utils/data/utils.py
# drop_long_seq_in_dataset, excess_length_strategy). The RL / reward / pretraining builders pick other collators.
AXOLOTL_LONGEST = (
    "axolotl's collator pads each batch to its longest sample without sample_packing or pad_to_sequence_len "
    "(DataCollatorForSeq2Seq / MultiModalChatDataCollator, padding=True, pad_to_multiple_of 64: core/builders/causal.py "
    "build_collator) and drops or cuts samples past sequence_len"
)
AXOLOTL_TO_CAP = "axolotl pads every sample to sequence_len under pad_to_sequence_len (core/builders/causal.py build_collator)"
AXOLOTL_OTHER_COLLATORS = ("rl", "reward_model", "process_reward_model", "pretraining_dataset", "batch_flattening")


def axolotl_padding(said: dict[str, str]) -> tuple[bool | None, str]:
    """How an axolotl config's SFT collator pads (sample_packing is handled by the caller): (True, why) each batch to its
    longest sample, (False, why) to sequence_len, (None, "") another builder's collator."""
    if said.get("pad_to_sequence_len") == "true":
        return False, AXOLOTL_TO_CAP
    if any(said.get(k, "none") not in ("none", "false", "", "[]") for k in AXOLOTL_OTHER_COLLATORS):
        return None, ""
    return True, AXOLOTL_LONGEST


def pads_to_longest(program: str | None, settings: dict[str, object] | None = None) -> tuple[bool | None, str]:
    """(True / False / None for not known, the fact's source) for the program a launch runs, given the script's
    arguments (name -> value) where a program's collator depends on them."""
    p = (program or "").split(" ", 1)[0].replace("\\", "/")
    for pattern, longest, why in PADDING:
        if pattern.search(p):
            return longest, why
    said = {k.replace("-", "_"): str(v).lower() for k, v in (settings or {}).items()}
    for pattern, when, longest_why, cap_why in PADDING_IF:
        if pattern.search(p):
            if said.get("use_packed_ds") == "true":  # InternVL's packed dataset: neither
                return None, ""
            if any(said.get(k) == v for k, v in when.items()):
                return True, longest_why
            return False, cap_why
    return _llamafactory(p, said) or (None, "")


def image_tokens(vision_tower: str | None, per_image: int | None) -> int | None:
    """Tokens one image takes: the model config's fixed count, else a CLIP-style tower's name (`patch14-336`: (336/14)^2)."""
    if per_image:
        return int(per_image)
    m = re.search(r"patch(\d+)-(\d+)", vision_tower or "")
    if m and int(m.group(1)):
        return (int(m.group(2)) // int(m.group(1))) ** 2
    return 256 if vision_tower and "patch14" in vision_tower else None  # CLIP ViT-L/14 at 224 px


def longest(train_file: str | None, per_image: int | None) -> Longest | None:
    """The data's longest sample: a published set's bound where the file is one (and a sample of it, where it lies
    here, stays within the bound), else a sample of the file where it lies here, else None."""
    if not train_file:
        return None
    path = Path(train_file)
    sampled = _sampled(path, per_image or 0) if path.is_file() else None
    known = PUBLISHED.get(path.name)
    if known is not None and known.text_tokens == REACHES:
        return Longest(REACHES, known.why, True)
    if known is not None and (per_image or not known.images):
        bound = Longest(known.images * (per_image or 0) + known.text_tokens, known.why, True)
        if sampled is None or sampled.tokens <= bound.tokens:
            return bound
    return sampled


# LLaMA-Factory names its datasets by their entries in `dataset_dir`/dataset_info.json (src/llamafactory/data/parser.py
# get_dataset_list at ff6d4d12): an entry with a hub or script address is fetched, one with `file_name` is read from
# dataset_dir (a file, or a folder whose files are all read: data/loader.py _load_single_dataset).
LLAMAFACTORY_REMOTE = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")


def llamafactory_longest(dataset: object, info: Path | None, per_image: int | None) -> Longest | None:
    """The longest sample of the LLaMA-Factory datasets `dataset` names (a comma list of dataset_info.json entries), each a
    sample of its local files; None where any of them is not here (a hub or script entry, a file missing): then the
    data's lengths are not known."""
    names = [n.strip() for n in (dataset if isinstance(dataset, list) else str(dataset or "").split(",")) for n in str(n).split(",")]
    names = [n for n in names if n]
    if not names or info is None:
        return None
    try:
        table = json.loads(info.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    found: list[Longest] = []
    for name in names:
        entry = table.get(name) if isinstance(table, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("file_name"), str) or any(k in entry for k in LLAMAFACTORY_REMOTE):
            return None
        path = info.parent / entry["file_name"]
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path] if path.is_file() else []
        sampled = [_sampled(f, per_image or 0) for f in files]
        if not sampled or any(s is None for s in sampled):
            return None
        found += [s for s in sampled if s is not None]
    best = max(found, key=lambda s: s.tokens)
    return Longest(best.tokens, f"{best.how}; the datasets {', '.join(names)} of {info.parent.name}/{info.name}", False)


def _records(path: Path) -> list:
    """The first SAMPLE records of a JSON list (read from its head, never whole) or of a JSON-lines file."""
    decoder = json.JSONDecoder()
    with path.open("r", encoding="utf-8", errors="replace") as f:
        text = f.read(16 * 2**20)
    stripped = text.lstrip()
    out: list = []
    if stripped.startswith("["):
        i = len(text) - len(stripped) + 1
        while len(out) < SAMPLE:
            while i < len(text) and text[i] in " \t\r\n,":
                i += 1
            if i >= len(text) or text[i] == "]":
                break
            try:
                record, i = decoder.raw_decode(text, i)
            except ValueError:  # the head ends inside a record: what was read is the sample
                break
            out.append(record)
        return out
    for line in text.splitlines()[:SAMPLE]:
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                break  # the head's last line, cut
    return out


def _texts(record) -> tuple[str, int]:
    """(the record's text, its images): LLaVA `conversations`, chat `messages`, or the string fields."""
    if not isinstance(record, dict):
        return "", 0
    images = record.get("image") or record.get("images") or []
    n = len(images) if isinstance(images, list) else 1
    turns = record.get("conversations") or record.get("messages")
    if isinstance(turns, list):
        parts = []
        for turn in turns:
            content = turn.get("value", turn.get("content", "")) if isinstance(turn, dict) else ""
            if isinstance(content, list):  # chat content parts: {"type": "text", "text": ...} / {"type": "image"}
                n += sum(1 for c in content if isinstance(c, dict) and c.get("type") == "image")
                content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
            parts.append(str(content))
        # a preference pair beside the prompt's turns (LLaMA-Factory's sharegpt ranking format: "chosen" / "rejected" as one
        # message each): each sequence is the prompt and one of them, the longer sizing the step
        answers = [record.get(k) for k in ("chosen", "rejected")]
        answers = [str(a.get("value", a.get("content", ""))) if isinstance(a, dict) else a for a in answers]
        parts += [max((a for a in answers if isinstance(a, str) and a), key=len)] if any(isinstance(a, str) and a for a in answers) else []
    else:
        parts = [str(v) for v in record.values() if isinstance(v, str)]
    text = "\n".join(parts)
    return text.replace("<image>", ""), max(n, text.count("<image>"))


def _sampled(path: Path, per_image: int) -> Longest | None:
    try:
        records = _records(path)
    except (OSError, ValueError, RecursionError):
        return None
    if not records:
        return None
    lengths = []
    for record in records:
        text, images = _texts(record)
        lengths.append(len(text) // CHARS_PER_TOKEN + 1 + images * per_image)
    return Longest(
        max(lengths),
        f"the longest of the first {len(records):,} samples of {path.name} ({CHARS_PER_TOKEN} characters per token, an estimate without the model's tokenizer)",
        False,
    )
