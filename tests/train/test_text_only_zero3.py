"""Text-only and image batches in the same ZeRO-3 step (vramfit.train.modality).

Without the zero-image hooks, the 2-rank run below aborts in its first step, in about 20 s: the
ranks' ZeRO-3 all-gathers no longer match (gloo: "Received data size doesn't match expected size.
Is there a distributed collective mismatch in your code?", rank 0 exit -6).
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from vramfit.train import modality

from train_support import check_run, launch, relative

IMAGE_TOKEN = 63


def tiny_llava():
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    text = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2)
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=14, projection_dim=16)
    torch.manual_seed(0)
    return LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN))


def text_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, IMAGE_TOKEN, (2, 8), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def image_batch() -> dict[str, torch.Tensor]:
    ids = text_batch()["input_ids"][:1]
    ids[0, 1:5] = IMAGE_TOKEN  # 28 px / 14 px patches: 4 image features (CLS dropped)
    pixels = torch.randn(1, 3, 28, 28, generator=torch.Generator().manual_seed(2))
    return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids), "pixel_values": pixels}


def vision_grads(model) -> dict[str, torch.Tensor | None]:
    """Vision tower and projector gradients, by parameter name."""
    inner = modality.multimodal_model(model)
    return {f"{part}.{n}": p.grad for part in ("vision_tower", "multi_modal_projector") for n, p in getattr(inner, part).named_parameters()}


def test_text_only_batch_runs_vision_with_same_loss_and_zero_gradients():
    plain = tiny_llava()
    hooked = copy.deepcopy(plain)
    assert modality.install(hooked)
    batch = text_batch()
    loss, reference = hooked(**batch).loss, plain(**batch).loss
    assert torch.equal(loss, reference)
    loss.backward()
    reference.backward()
    assert all(g is None for g in vision_grads(plain).values())
    # Zero gradients for exactly the parameters an image batch trains (not the last vision layer:
    # Llava reads features from the second-to-last one).
    with_images = tiny_llava()
    with_images(**image_batch()).loss.backward()
    trained = {n for n, g in vision_grads(with_images).items() if g is not None}
    grads = vision_grads(hooked)
    assert trained and {n for n, g in grads.items() if g is not None} == trained
    assert not any(grads[n].any() for n in trained)
    llm = [p.grad for p in modality.multimodal_model(hooked).language_model.parameters()]
    assert all(torch.equal(g, r.grad) for g, r in zip(llm, modality.multimodal_model(plain).language_model.parameters()))


def test_batch_with_images_is_untouched():
    plain = tiny_llava()
    hooked = copy.deepcopy(plain)
    assert modality.install(hooked)
    calls = []
    modality.multimodal_model(hooked).vision_tower.register_forward_hook(lambda *_: calls.append(1))
    batch = image_batch()
    assert torch.equal(hooked(**batch).loss, plain(**batch).loss)
    assert len(calls) == 1


def test_peft_wrapped_model_is_found():
    """LoRA recipes wrap the model (PeftModel > LoraModel > LlavaForConditionalGeneration > LlavaModel)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_llava(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert type(modality.multimodal_model(model)).__name__ == "LlavaModel"
    assert modality.install(model)
    calls = []
    modality.multimodal_model(model).vision_tower.register_forward_hook(lambda *_: calls.append(1))
    model(**text_batch())
    assert len(calls) == 1


def test_unsupported_model_left_alone():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2))
    assert modality.multimodal_model(model) is None and not modality.install(model)


@pytest.mark.slow
def test_zero3_step_with_text_only_rank(tmp_path):
    """The ZeRO-3 recipe's smoke, 2 ranks x 1 sample, data in order: every step rank 0 has an image
    and rank 1 a text-only conversation (the Trainer's sequential sampler; accelerate gives rank r the
    samples r, r + 2, ...)."""
    records = []
    for i in range(8):
        if i % 2 == 0:  # the smoke data's images, train-0.png ...
            records.append(
                {
                    "id": f"image-{i}",
                    "image": f"train-{i}.png",
                    "conversations": [{"from": "human", "value": "<image>\nWhat colour is the square?"}, {"from": "gpt", "value": "The square is red."}],
                }
            )
        else:
            records.append(
                {
                    "id": f"text-{i}",
                    "conversations": [{"from": "human", "value": "Repeat after me: alpha beta gamma"}, {"from": "gpt", "value": "alpha beta gamma"}],
                }
            )
    data = tmp_path / "mixed.json"
    data.write_text(json.dumps(records))
    run = launch(
        "sharegpt4v-7b-16xa100-80g",
        tmp_path / "run",
        [
            f"data.train_file={relative(data)}",
            "train_sampling_strategy=sequential",
            "per_device_train_batch_size=1",
            "global_batch_size=2",
            "max_steps=2",
            "save_steps=2",
            "ddp_timeout=120",
        ],
        timeout=300,
    )
    check_run(run)
    assert "ZeRO-3: text-only batches run the vision tower on a zero image" in run.result.stdout
