"""Under ZeRO-3, text-only batches run the vision tower on a zero image, as batches with images do.

ZeRO-3 gathers a module's parameters with a collective each time the module runs, forward and
backward. transformers' Llava forward (`LlavaModel.forward`, models/llava/modeling_llava.py) runs
`get_image_features` (vision tower, then multi_modal_projector) only `if pixel_values is not None`,
so a rank whose batch is text-only skips the collectives that a rank with images waits in. On CPU
(gloo) the first such step aborts ("Received data size doesn't match expected size"); on GPUs
(NCCL) mismatched collectives hang until the timeout or fail.

Upstream LLaVA (haotian-liu/LLaVA) gives every text-only sample a zero image (llava/train/train.py,
LazySupervisedDataset) and keeps its features in the graph as a zero-length slice,
`cur_image_features[0:0]` (llava/model/llava_arch.py, prepare_inputs_labels_for_multimodal). The
same here, as two forward pre-hooks on the inner multimodal model:
- on the model: note whether this forward has images (pixel_values or precomputed encoder outputs);
- on its language_model, ahead of ZeRO-3's own hook there (where a batch with images has just run the
  vision tower and projector, after the embedding lookup): for a forward without images, run
  `get_image_features` on an all-zeros image of the vision config's size and add the sum of a
  zero-length slice of the features to inputs_embeds. That sum is exactly 0 (the loss is unchanged)
  and the vision tower and projector run forward and backward (zero gradients) on every rank.

Model types: llava, the type of every supervised recipe here. Others (llava_next, qwen2_5_vl, ...)
take further image inputs (image_sizes, image_grid_thw); `install` leaves them alone.
"""

from __future__ import annotations

import inspect

import torch

SUPPORTED = ("llava",)


def multimodal_model(model) -> torch.nn.Module | None:
    """The module holding vision_tower and language_model as children (LlavaModel), inside any wrapper
    (PEFT included); None for a model type not in SUPPORTED."""
    for module in model.modules():
        children = dict(module.named_children())
        model_type = getattr(getattr(module, "config", None), "model_type", None)
        if "vision_tower" in children and "language_model" in children and model_type in SUPPORTED:
            return module
    return None


class ZeroImage:
    """The two hooks, sharing whether the current forward of `inner` has images."""

    def __init__(self, inner: torch.nn.Module):
        self.inner = inner
        self.signature = inspect.signature(inner.forward)
        vision = inner.config.vision_config
        self.shape = (1, vision.num_channels, vision.image_size, vision.image_size)
        self.text_only = False

    def note_images(self, module, args, kwargs) -> None:
        given = self.signature.bind_partial(*args, **kwargs).arguments
        encoded = given.get("mm_encoder_outputs") or {}
        self.text_only = given.get("pixel_values") is None and encoded.get("image") is None

    def add_zero_image(self, module, args, kwargs):
        if not self.text_only or kwargs.get("inputs_embeds") is None:
            return None
        self.text_only = False
        embeds = kwargs["inputs_embeds"]
        zeros = torch.zeros(self.shape, dtype=embeds.dtype, device=embeds.device)
        features = self.inner.get_image_features(pixel_values=zeros, return_dict=True).pooler_output
        kwargs["inputs_embeds"] = embeds + torch.cat(list(features))[0:0].sum().to(embeds.dtype)
        return args, kwargs


def install(model) -> bool:
    """Hook the model's multimodal part; False (nothing done) when its model type is not supported."""
    inner = multimodal_model(model)
    if inner is None:
        return False
    zero_image = ZeroImage(inner)
    inner.register_forward_pre_hook(zero_image.note_images, with_kwargs=True)
    # prepend: before ZeRO-3's pre-forward hook on language_model, so every rank gathers the vision
    # tower's parameters at the same point of its module order.
    inner.language_model.register_forward_pre_hook(zero_image.add_zero_image, with_kwargs=True, prepend=True)
    return True
