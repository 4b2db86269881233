"""A text stack of Gated DeltaNet layers (Qwen3-Next / Qwen3.5) traced at short lengths and extrapolated in length.

transformers' `torch_chunk_gated_delta_rule` (the fallback without the fla kernels) loops in Python once per 64 tokens;
under fake tensors every other op takes the same time at any size, so a direct trace of such a model takes time in
proportion to the length (a 65,535-token review ran for more than 15 minutes). Its memory grows linearly with the length,
and the attention mask of a padded batch with its square: the trace takes four short lengths and extrapolates. Tiny
config from transformers' own config class; no network, no GPU."""

from __future__ import annotations

from vramfit.planner import Setup, trace

from planner_support import qwen3_next_config


def test_long_context_delta_net_is_traced_short_and_extrapolated_in_length(tmp_path, monkeypatch):
    """At 65,536 tokens no step runs longer than 512 tokens; at 1,088 tokens (affordable directly) the extrapolation
    from 128-512 tokens agrees with the direct trace: exactly, as fake tensors count, 0.1% allowed. The padded batch's
    attention mask (1 byte per token squared per sample) is the parabola's term; the plan says what was done."""
    path = qwen3_next_config(tmp_path, layers=4)
    overrides = ["method=lora", "per_device_train_batch_size=2", "lora_target_modules=q_proj,v_proj", "mixer_kernels=torch"]
    long = Setup.from_args(path, "h100", 1, overrides=[*overrides, "seq_len=65536"])
    run = trace._runs
    longest: list[int] = []

    def spy(setup, arch, text_layers, vision_layers, notes, lengths, split_vision=False):
        longest.append(max(lengths))
        return run(setup, arch, text_layers, vision_layers, notes, lengths, split_vision)

    monkeypatch.setattr(trace, "_runs", spy)
    far = trace.trace_step(long)
    assert far.lengths == (128, 256, 384, 512) and max(longest) == 512, (far.lengths, longest)
    assert any("extrapolated in length, linear in length" in n for n in far.notes), far.notes
    assert any("the square of the length" in n for n in far.notes), far.notes  # the mask of the padded batch

    moderate = long.replace(seq_len=1088)
    extrapolated = trace.trace_step(moderate)  # the same short runs, from the cache
    assert extrapolated.lengths == (128, 256, 384, 512) and max(longest) == 512
    monkeypatch.setattr(trace, "_length_plan", lambda setup, arch: None)
    direct = trace.trace_step(moderate, cache=False)
    assert direct.lengths == () and max(longest) == 1088
    for field in ("peak_bytes", "train_transient"):
        got, want = getattr(extrapolated, field), getattr(direct, field)
        assert abs(got - want) <= 0.001 * want, (field, got, want)
    # the mask's square term: at 65,536 tokens, 2 samples x 65,536^2 bytes are in the extrapolated moments
    assert far.train_transient > 2 * 65536**2


def test_short_runs_are_shared_by_every_length_of_one_setup(tmp_path, monkeypatch):
    """A review plans one setup at several lengths (shorter samples, the padding-free typical length): the short runs
    are cached apart from the length, so only the first length traces."""
    path = qwen3_next_config(tmp_path, layers=8)  # traced at 4 and 8 layers: 8 at the shortest and longest length only
    base = Setup.from_args(path, "h100", 1, overrides=["method=lora", "lora_target_modules=q_proj,v_proj", "seq_len=8192", "mixer_kernels=torch"])
    first = trace.trace_step(base)
    assert first.lengths and not first.cached

    def refuse(*args, **kwargs):
        raise AssertionError("traced again")

    monkeypatch.setattr(trace, "_runs", refuse)
    trace._raw_memo.clear()  # a new process: the disk cache answers
    for seq in (4095, 16384, 32768):
        again = trace.trace_step(base.replace(seq_len=seq))
        assert again.lengths == first.lengths and again.train_transient != first.train_transient
