"""Review launch files: read them, map them onto a recipe, run the runner's checks and the memory
planner on it, and compare it with the closest tested recipe.

The synthesised recipe is written to a temporary folder and checked by `vramfit.validate.validate`,
the runner's own entry point, so a review sees exactly what `vramfit validate` would. Three rules
guard the shared recipe tree rather than a run (the recipe's name, DeepSpeed JSONs under
deepspeed_configs/, no absolute paths) and are left out of a review: the reviewed DeepSpeed JSON is
copied into the temporary folder's deepspeed_configs/, next to vramfit's presets (which the
planner's fixes name), and the user's own paths stay as they wrote them.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vramfit.checks.deepspeed_json import CONFIG_DIR
from vramfit.paths import PACKAGE_ROOT
from vramfit.planner.headroom import HEADROOM
from vramfit.planner.setup import ATTENTION_TARGETS, PEFT_DROPOUT_RULE, PEFT_REFUSED_RULE
from vramfit.problems import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK, RECIPE_TREE, ConfigError, Problem
from vramfit.review import mapping, reference
from vramfit.review.findings import Finding, ordered
from vramfit.review.sources import NotReviewed, read_all


@dataclass
class Review:
    findings: list[Finding]
    exit_code: int
    plan: Any = None  # vramfit.planner.Plan for the stated hardware
    closest_recipe: str | None = None
    summary: list[str] = field(default_factory=list)  # how the files were read, for the human report
    # (the local path the files name, the table model planned for it by its folder's name): the verdict rests on it
    model_assumed: tuple[str, str] | None = None
    # the plan's length is a worst case the files do not bound: batches padded to their longest sample, or padding-free,
    # planned at the cap the data's unknown lengths may not reach (the verdict is said as such in a warning)
    length_worst_case: bool = False
    # the DeepSpeed JSON the launch names was not found and was planned from its file name (sources.zero_from_name): that
    # name; the verdict rests on it (an upper bound without an offload in the name)
    deepspeed_by_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "plan": self.plan.to_json() if self.plan is not None else None,
            "closest_recipe": self.closest_recipe,
            "exit_code": self.exit_code,
            "model_assumed": None if self.model_assumed is None else {"path": self.model_assumed[0], "planned_as": self.model_assumed[1]},
            "length_worst_case": self.length_worst_case,
            "deepspeed_by_name": self.deepspeed_by_name,
        }


def review(
    paths: list[str],
    gpu: str | None = None,
    gpus: int | None = None,
    nodes: int | None = None,
    host_ram_gib: float | None = None,
    against: str | None = None,
    model_config: str | None = None,
    transformers_version: str | None = None,
    image_tokens: int | None = None,
    sample_length: int | None = None,
    torch_version: str | None = None,
    bitsandbytes_version: str | None = None,
    trl_version: str | None = None,
    accelerate_version: str | None = None,
    mixer_kernels: str | None = None,
) -> Review:
    flags = dict(
        mixer_kernels=mixer_kernels,
        trl_version=trl_version,
        accelerate_version=accelerate_version,
        torch_version=torch_version,
        bitsandbytes_version=bitsandbytes_version,
        gpu=gpu,
        gpus=gpus,
        nodes=nodes,
        host_ram_gib=host_ram_gib,
        against=against,
        model_config=model_config,
        transformers_version=transformers_version,
        image_tokens=image_tokens,
        sample_length=sample_length,
    )
    sources, first = _read_and_review(paths, flags)
    lines = sources[0].launch_lines if sources and sources[0].kind == "shell" else []
    if len(lines) < 2:
        return first
    # several launch commands in one script: each is reviewed; a finding that differs between them names its launch
    reviews = [first] + [_read_and_review(paths, flags, launch=k)[1] for k in range(1, len(lines))]
    return _merge(reviews, lines, sources[0].label)


def _read_and_review(paths: list[str], flags: dict, launch: int | None = None) -> tuple[list | None, Review]:
    """(the sources read, or None; the review of launch `launch` of a script - the first when None)."""
    try:
        sources = read_all(paths, launch=launch or 0, known=mapping.known_key)
    except ConfigError as error:
        return None, _unreadable(error)
    except NotReviewed as said:
        return None, Review([said.finding], EXIT_INCOMPLETE)
    return sources, _review_sources(sources, **flags)


def _merge(reviews: list[Review], lines: list[int], label: str) -> Review:
    """One review of a script's launches: findings every launch shares once, the others prefixed with their launch."""
    import dataclasses

    def same(f: Finding) -> tuple:
        return (f.severity, f.file, f.key, f.what, f.line)

    shared = set.intersection(*({same(f) for f in r.findings} for r in reviews))
    findings = [f for f in reviews[0].findings if same(f) in shared and "launch commands" not in f.what]
    for n, (r, line) in enumerate(zip(reviews, lines), start=1):
        for f in r.findings:
            if same(f) not in shared and "launch commands" not in f.what:
                findings.append(dataclasses.replace(f, what=f"launch {n} of {len(lines)} (line {line}): {f.what}"))
    findings.append(
        Finding(
            "info",
            label,
            "",
            f"{len(lines)} launch commands (lines {', '.join(map(str, lines))}), each reviewed; findings that differ between them "
            "name their launch; the summary and the memory plan are the first's",
            line=lines[0],
        )
    )
    codes = [r.exit_code for r in reviews]
    code = EXIT_FAILED if EXIT_FAILED in codes else EXIT_BAD_INPUT if EXIT_BAD_INPUT in codes else EXIT_INCOMPLETE if EXIT_INCOMPLETE in codes else EXIT_OK
    first = reviews[0]
    assumed = next((r.model_assumed for r in reviews if r.model_assumed is not None), None)  # a verdict resting on a name says so
    by_name = next((r.deepspeed_by_name for r in reviews if r.deepspeed_by_name is not None), None)
    worst = any(r.length_worst_case for r in reviews)  # a launch planned at a cap its data may not reach says so
    return Review(ordered(findings), code, first.plan, first.closest_recipe, first.summary, assumed, worst, by_name)


def _review_sources(
    sources,
    gpu: str | None = None,
    gpus: int | None = None,
    nodes: int | None = None,
    host_ram_gib: float | None = None,
    against: str | None = None,
    model_config: str | None = None,
    transformers_version: str | None = None,
    image_tokens: int | None = None,
    sample_length: int | None = None,
    torch_version: str | None = None,
    bitsandbytes_version: str | None = None,
    trl_version: str | None = None,
    accelerate_version: str | None = None,
    mixer_kernels: str | None = None,
) -> Review:
    with tempfile.TemporaryDirectory(prefix="vramfit-review-") as tmp:
        workdir = Path(tmp)
        shutil.copytree(PACKAGE_ROOT / CONFIG_DIR, workdir / CONFIG_DIR)
        try:
            mapped = mapping.build(sources, workdir, model_config, transformers_version, image_tokens, sample_length, trl_version)
            if torch_version:  # the run's torch (planner knob torch_version): its Trainer defaults and zero_grad
                mapped.recipe.setdefault("planner", {})["torch_version"] = torch_version
                mapped.origins["planner.torch_version"] = mapping.Origin(mapped.primary.label, "--torch-version")
                mapped.findings.append(
                    Finding(
                        "info",
                        mapped.primary.label,
                        "--torch-version",
                        f"planned under torch {torch_version}: where the files set no optim, the Trainer's default is adamw_torch "
                        "before torch 2.8 (multi-tensor: an fp32 intermediate the size of a moment in the optimizer step), "
                        "adamw_torch_fused from 2.8; zero_grad keeps the gradients before torch 2.0",
                        source="planner",
                    )
                )
            _accelerate_reading(mapped, accelerate_version)
            if mixer_kernels:  # the sequence mixers' path (planner knob mixer_kernels, planner/mixer_kernels.py)
                mapped.recipe.setdefault("planner", {})["mixer_kernels"] = mixer_kernels
                mapped.origins["planner.mixer_kernels"] = mapping.Origin(mapped.primary.label, "--mixer-kernels")
            if bitsandbytes_version:  # the run's bitsandbytes (planner knob bitsandbytes_version): what a 4-bit linear keeps
                mapped.recipe.setdefault("planner", {})["bitsandbytes_version"] = bitsandbytes_version
                mapped.origins["planner.bitsandbytes_version"] = mapping.Origin(mapped.primary.label, "--bitsandbytes-version")
            ref, why = reference.closest(mapped.recipe, against, gpu, model_known=not mapped.model_missing)
            findings = mapped.findings + mapping.fill_hardware(mapped, gpu, gpus, nodes, host_ram_gib, ref)
        except ConfigError as error:
            return _unreadable(error)
        if mapped.not_modelled:
            findings.append(
                Finding("info", mapped.primary.label, "", f"read but not reviewed (data handling, projector shape, ...): {', '.join(mapped.not_modelled)}")
            )
        path = workdir / "recipe.yaml"
        path.write_text(yaml.safe_dump(mapped.recipe, sort_keys=False))
        with warnings.catch_warnings():  # the libraries' deprecation notes about arguments are findings already, or not ours
            warnings.simplefilter("ignore", FutureWarning)
            recipe, problems = _validate(path)
        findings += [
            _finding(p, mapped) for p in problems if _for_a_run(p) and not (mapped.model_missing and _needs_model(p)) and not _trl_rule_on_verl(p, mapped)
        ]
        plan = None
        missing = [m for s in sources for m in s.missing]
        if recipe is not None and not mapped.model_missing and not any("(deepspeed" in m or "(accelerate" in m for m in missing):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                plan = _plan(recipe, mapped, host_ram_gib is not None, findings)
            if ref is not None and reference.comparable(why):
                differences = reference.differences(mapped, recipe, ref, _json(recipe.path(recipe.deepspeed)), _json(ref.path(ref.deepspeed)))
                if mapped.litgpt is not None:  # only what a LitGPT config can say (its keys: mapping.LITGPT_SPELLING)
                    differences = [f for f in differences if "no LitGPT key" not in f"{f.key} {f.what} {f.fix}"]
                if mapped.verl is not None:  # only what a verl launch can say (its keys: mapping.VERL_SPELLING)
                    differences = [f for f in differences if "no verl key" not in f"{f.key} {f.what} {f.fix}" and f.key != "data.max_prompt_length"]
                if mapped.llmfoundry is not None:  # only what an llm-foundry YAML can say, in its own terms
                    own = ("max_seq_len", "device_train_microbatch_size", "fsdp_config.activation_checkpointing", "device_eval_batch_size")
                    differences = [f for f in differences if f.key in own and "global_train_batch_size" not in f"{f.what} {f.fix}"]
                findings += differences
        if plan is not None and plan.incomplete:  # a plan term not computed (said in its finding): incomplete, exit 3
            missing = [*missing, *plan.incomplete]
        findings = ordered(findings)
        code = (
            EXIT_FAILED
            if any(f.severity == "error" for f in findings)
            else EXIT_INCOMPLETE
            if mapped.model_missing or missing or mapped.terms_missing
            else EXIT_OK
        )
        summary = _summary(mapped, _json(workdir / mapped.recipe["deepspeed"]), ref, why)
        worst = mapped.longest_unknown is not None or mapped.padding_free_worst_case is not None
        by_name = mapped.deepspeed_from_name[0] if mapped.deepspeed_from_name is not None and plan is not None else None
        return Review(findings, code, plan, ref.name if ref else None, summary, mapped.model_by_name, worst, by_name)


def _unreadable(error: ConfigError) -> Review:
    findings = [Finding("error", p.file, p.key, p.what, p.fix) for p in error.problems.items]
    return Review(findings, EXIT_BAD_INPUT)


def _json(path: Path) -> dict[str, Any]:
    from vramfit import inputs

    try:
        data = inputs.load_json(path, "model-config")
    except ConfigError:
        return {}
    return data if isinstance(data, dict) else {}


def _validate(path: Path):
    """(the loaded recipe or None, every problem) from the runner's own validation."""
    from vramfit import recipe as recipe_mod
    from vramfit.validate import validate

    try:
        result = validate(str(path), plan=False)
        return result.recipe, result.warnings
    except ConfigError as error:
        problems = error.problems.items
    try:
        return recipe_mod.load(path), problems
    except ConfigError:
        return None, problems


def _needs_model(p: Problem) -> bool:
    """A problem read off the stand-in model config (the real one was not found): not the user's."""
    return (
        p.key.startswith(("model", "data.max_pixels", "data.images", "data.format"))
        or "model_configs/" in p.file
        or p.file.endswith(".json")
        and "llama-3.2-3b" in p.file
    )


def _for_a_run(p: Problem) -> bool:
    """False for the rules that keep the shared recipe tree tidy (its naming, repository-relative paths)."""
    return p.rule != RECIPE_TREE


def _trl_rule_on_verl(p: Problem, mapped: mapping.Mapped) -> bool:
    """A rule of TRL's GRPOConfig applied to a verl launch: verl builds its own config, checked by verl.check."""
    return mapped.verl is not None and "refuses these arguments" in p.what


def _finding(p: Problem, mapped: mapping.Mapped) -> Finding:
    """A validation problem, named in the user's files and keys."""
    ds_label = f"deepspeed_configs/{Path(mapped.recipe['deepspeed']).name}"
    severity, what, fix = p.severity, p.what, p.fix
    if p.file == ds_label:
        file, key = mapped.deepspeed_label, p.key
        what, fix = what.replace(ds_label, file), fix.replace(ds_label, file)
        line = mapped.deepspeed.line_of(p.key) if mapped.deepspeed is not None and p.key else None
    else:
        origin = _origin(mapped, p.key)
        file, key, line = origin.file, origin.key, origin.line
    if p.key == "global_batch_size":  # the files' batch on other hardware: a different run, not a failing one
        origin = _origin(mapped, "training.per_device_train_batch_size")
        # the hardware the review was asked about (or took from a recipe) differs from the script's: a consequence of that
        # choice, said so the user keeps the batch if they mean to; nothing in the files fails
        file, key, line, severity = origin.file, origin.key, origin.line, "info"
        what = (
            f"the global batch changes from the {mapped.recipe['global_batch_size']} sequences per optimizer step the files give "
            f"on their {mapped.script_ranks} ranks ({what})"
        )
    if p.rule == PEFT_DROPOUT_RULE:  # the fix in the user's own keys, not the recipe's
        fix = f"{mapped.edit('model.lora.dropout', 0)}, or {mapped.edit('model.lora.target_modules', ATTENTION_TARGETS)}."
        severity, what = _fused_experts_reading(mapped, what)
        fix = fix if severity != "info" else ""
    if p.rule == PEFT_REFUSED_RULE and " to " in fix:  # the accepted targets, in the user's own keys
        accepted = fix.split(" to ", 1)[1].rstrip(".")
        o = mapped.origins.get("model.lora.target_modules")
        if o is not None and "target_linear" in o.key:  # axolotl's switch names no modules: list them in its place
            fix = f"{mapping.edit(mapped.settings.kind, 'model.lora.target_modules', accepted, None)} in place of {o.key}."
        else:
            fix = f"{mapped.edit('model.lora.target_modules', accepted)}."
    if "refuses these arguments" in what and mapped.primary.program.startswith("swift "):
        # ms-swift builds and checks its own argument classes; TRL's __post_init__ rules are not the ones it runs
        severity, fix = "info", ""
        what = f"{what} - ms-swift checks its own arguments, not with TRL's class: not reviewed"
    elif "refuses these arguments" in what and "divisible by num_generations" in what and not _trl_own_script(mapped):
        # the rule came with per_device_train_batch_size counting completions (TRL 0.15, huggingface/trl#2776); a
        # repository's own GRPO script on an older TRL (VLM-R1 / open-r1 / R1-V forks) expands each prompt to
        # num_generations completions on its rank and has no such rule
        counts = _trl_counts_completions(mapped.trl_pin)
        if counts is False:
            severity, fix = "info", ""
            what = f"{what} - this repository pins {mapped.trl_pin}, before the rule (TRL 0.15, huggingface/trl#2776): not the run's"
        elif counts is None:  # nothing pinned: the installed TRL's rule, which maintained forks' trainers keep too
            what = (
                f"{what} - a rule of TRL 0.15 and later (huggingface/trl#2776), which VLM-R1's and open-r1's own GRPO trainers "
                "keep; nothing pins trl beside the files (a fork on an older TRL expands each prompt to num_generations "
                "completions and has no such rule: pin it beside the script to review it so)"
            )
    return Finding(severity, file, key, what, fix, "validation", line)


def _trl_own_script(mapped: mapping.Mapped) -> bool:
    """TRL's own example scripts and CLI: only TRL's semantics apply to them."""
    program = (mapped.primary.program or "").replace("\\", "/")
    return "examples/scripts/" in program or program.startswith(("trl/", "trl ")) or "/trl/" in program


def _fused_experts_reading(mapped: mapping.Mapped, what: str) -> tuple[str, str]:
    """(severity, what) of PEFT refusing dropout on fused MoE experts. transformers 5 fuses the experts into one
    parameter per projection, which PEFT adapts through lora.ParamWrapper when it resolves the targets itself
    (`all-linear`, or expert projection names); transformers 4 keeps one nn.Linear per expert, which LoRA wraps with its
    dropout; axolotl (lora_target_linear) and ms-swift resolve `all-linear` to module names themselves. A warning where
    the repository pins transformers 5 and PEFT resolves the targets; otherwise a note: which modules the run's stack
    adapts is not in the files."""
    pin = mapped.transformers_pin
    origin = mapped.origins.get("model.lora.target_modules")
    own_resolution = (origin is not None and "target_linear" in origin.key) or (mapped.primary.program or "").startswith("swift ")
    decides_5 = pin is not None and pin.major >= 5 and pin.op in ("==", "~=", ">=")
    if decides_5 and not own_resolution:
        return "warning", f"this repository pins {pin}, whose MoE experts are fused: {what}"
    said = f"this repository pins {pin}" if pin is not None else "nothing beside the files pins transformers"
    how = "; the framework resolves the target modules itself" if own_resolution else ""
    return "info", f"{what} - under transformers 5 with PEFT resolving the targets only ({said}{how})"


def _accelerate_reading(mapped: mapping.Mapped, given: str | None) -> None:
    """The run's accelerate for the plan (planner knob accelerate_version: FSDP2 gradient accumulation, knobs.py
    FSDP2_NO_SYNC_SINCE): --accelerate-version, else an exact pin beside the script (`accelerate==X`; a range or a git
    pin does not say which release ran, so the installed one is read, as without a pin)."""
    pin = mapped.accelerate_pin
    if given:
        version, where = given, "--accelerate-version"
    elif pin is not None and pin.op == "==":
        version, where = pin.version, f"this repository pins {pin}"
    else:
        return
    mapped.recipe.setdefault("planner", {})["accelerate_version"] = version
    mapped.origins["planner.accelerate_version"] = mapping.Origin(mapped.primary.label, "--accelerate-version" if given else pin.file)
    mapped.findings.append(Finding("info", mapped.primary.label, "", f"planned under accelerate {version} ({where})", source="planner"))


def _origin(mapped: mapping.Mapped, key: str) -> mapping.Origin:
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in mapped.origins:
            return mapped.origins[".".join(parts[:n])]
    if parts[0] in ("model", "method") and "method" in mapped.origins:
        return mapped.origins["method"]
    return mapped.origin(key)


def _plan(recipe, mapped: mapping.Mapped, host_known: bool, findings: list[Finding]):
    from vramfit.planner import plan_recipe
    from vramfit.planner.plan import with_overrides

    pinned = _pinned_attention(recipe, mapped)
    if pinned is not None and pinned[0] in ("eager", "torch"):  # the pinned release (or torch) runs it eager: so is the plan
        try:
            recipe = _eager(recipe)
        except ConfigError:  # a recipe the override cannot be applied to: planned as the files say
            pinned = None
    try:
        try:
            plan = _plan_with_settings(recipe, mapped, findings) or plan_recipe(recipe)
        except ConfigError as error:
            rules = {p.rule for p in error.problems.items}
            if not rules <= {PEFT_DROPOUT_RULE, PEFT_REFUSED_RULE}:
                raise
            # PEFT's lora.ParamWrapper on fused MoE experts (transformers 5) refuses dropout; PEFT refuses some modules on
            # some architectures (Mamba's out_proj): said, and planned as PEFT builds them once the run is fixed
            findings += [_finding(p, mapped) for p in error.problems.items]
            overrides: dict = {"model.lora.dropout": 0} if PEFT_DROPOUT_RULE in rules else {}
            if PEFT_REFUSED_RULE in rules:
                from vramfit.planner import params
                from vramfit.planner.setup import peft_accepted_targets

                arch = params.summary(recipe.path(recipe.model.config))
                overrides["model.lora.target_modules"] = peft_accepted_targets(arch, recipe.model.lora.target_modules)[1]
            recipe = with_overrides(recipe, overrides)
            plan = _plan_with_settings(recipe, mapped, findings) or plan_recipe(recipe)
    except ConfigError as error:
        findings += [_finding(p, mapped) for p in error.problems.items]
        return None
    except (ValueError, TypeError) as exc:  # a setting the checks above already refuse (a word where a number belongs)
        findings.append(
            Finding(
                "info",
                mapped.primary.label,
                "",
                f"memory not planned: the planner cannot read these settings ({exc})",
                "fix the errors above, then review again.",
                "planner",
            )
        )
        return None
    except Exception as exc:  # an architecture the planner does not summarise yet: the rest of the review stands
        mapped.model_missing = (
            f"memory not planned: the planner cannot summarise {recipe.model.architecture} "
            f"({exc.__class__.__name__}: {exc}); everything that needs no memory plan was checked"
        )
        findings.append(
            Finding(
                "info",
                mapped.primary.label,
                "",
                mapped.model_missing,
                "report it; pass --model-config with a config of the same shape to plan it meanwhile.",
                "planner",
            )
        )
        return None
    if not host_known:
        plan.host_ram_available_gib, plan.host_ram_fits = None, True
    file = mapped.primary.label
    if plan.incomplete:  # a term neither modelled nor traced: said, and the review exits 3 (incomplete)
        findings.append(
            Finding(
                "info",
                file,
                "",
                f"memory plan incomplete, not computed: {'; '.join(plan.incomplete)}; the peak below leaves it out (a lower bound)",
                "report it (vramfit plan --model-config with this model's config.json reproduces it).",
                "planner",
            )
        )
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in plan.breakdown.items() if v >= 0.05)
    where = f"{recipe.world_size} x {recipe.hardware.gpu}"
    # what does not fit, and the planner's fixes after a verdict's own edit: one wording for every finding below
    over = f"predicted peak {plan.per_gpu_peak_gib:.1f} GiB per GPU exceeds the {plan.gpu_memory_gib:.1f} GiB of each " + (
        f"{recipe.hardware.gpu}, in {plan.peak_phase} ({parts})"
        if plan.per_gpu_peak_gib > plan.gpu_memory_gib
        else f"{recipe.hardware.gpu} less the {HEADROOM:.0%} the planner keeps for memory outside PyTorch's allocator "
        f"(NCCL, cuBLAS workspaces: {plan.usable_gib:.1f} GiB usable), in {plan.peak_phase} ({parts})"
    )
    pin_fix = ""
    if pinned is not None and pinned[0] in ("eager", "torch"):  # the planner's own fixes keep the eager attention; the pin's is said first
        over = f"{_pinned_eager(pinned, mapped)}: {over}"
        pin_fix = _pinned_fixes(pinned, mapped)
    fixes_text = _fixes(plan, mapped) if plan.fixes else ""
    or_fixes = "".join(f"; or {f}" for f in (pin_fix, fixes_text) if f)
    eval_only = not plan.fits and plan.peak_phase == "evaluation" and plan.phases.get("train", 0.0) <= plan.usable_gib
    if eval_only:  # training fits; the evaluation finding below names the excess and its fix (one fault, said once)
        findings.append(
            Finding(
                "info",
                file,
                "--gpu",
                f"training fits: predicted {plan.phases['train']:.1f} of {plan.gpu_memory_gib:.1f} GiB per GPU on {where}; evaluation does not (below)",
                source="planner",
            )
        )
    elif plan.fits:
        by_name = ""
        if mapped.deepspeed_from_name is not None:  # the DeepSpeed JSON not found: its stage read from its name (sources)
            json_name, _, offload = mapped.deepspeed_from_name
            by_name = f"; planned from the DeepSpeed JSON's name ({json_name}, not found) with DeepSpeed's defaults otherwise" + (
                ", which holds if the JSON offloads what its name says" if offload else ", an upper bound: offload in the JSON only lowers it"
            )
        findings.append(
            Finding(
                "info",
                file,
                "--gpu",
                f"predicted peak {plan.per_gpu_peak_gib:.1f} of {plan.gpu_memory_gib:.1f} GiB per GPU on {where}, in {plan.peak_phase} ({parts}){by_name}",
                source="planner",
            )
        )
    elif mapped.image_assumed and (smaller := _largest_image_that_fits(plan)) is not None:
        # images planned at the maximum the files allow, the data's size unknown: the verdict holds only for such images
        tokens, pixels, fitting = smaller
        origin = mapped.origin("data.max_pixels")
        findings.append(
            Finding(
                "warning",
                file,
                "--gpu",
                f"does not fit if the images reach the maximum the files allow ({plan.setup.image_tokens:,} tokens per image, "
                f"planned so because the data's image size is not known): {over}; "
                f"at {tokens:,} tokens per image it fits ({fitting.per_gpu_peak_gib:.1f} GiB)",
                f"cap the images: {mapped.edit('data.max_pixels', pixels)}; or pass --image-tokens N with your data's typical "
                f"tokens per image (pixels / {pixels // max(1, tokens)}) to plan at its size{or_fixes}",
                "planner",
            )
        )
    elif mapped.padding_free_worst_case is not None and plan.setup.padding_free and (shorter := _padding_free_tokens_that_fit(plan)) is not None:
        # padding-free batches of unknown length: only the worst case (every sample at the cap) was planned, and it does not fit
        tokens, fitting = shorter
        s = plan.setup
        if s.method == "grpo" and s.grpo_whole_logits:  # verl: a sample is its prompt and response
            s = s.replace(seq_len=s.seq_len + s.max_completion_length)
        origin = mapped.padding_free_worst_case
        findings.append(
            Finding(
                "warning",
                origin.file,
                origin.key,
                f"does not fit if every sample of a micro-batch reaches the cap: planned at that worst case, {s.micro_batch * s.sequences_per_sample} x "
                f"{s.seq_len:,} = {s.micro_batch * s.sequences_per_sample * s.seq_len:,} tokens per micro-batch, because padding-free batches hold their "
                f"samples' own tokens and the data's length is not known: {over}; "
                f"it fits while a micro-batch holds at most {tokens:,} tokens ({fitting.per_gpu_peak_gib:.1f} GiB)",
                f"check your data's tokens per micro-batch ({s.micro_batch * s.sequences_per_sample} sequences); to bound them, "
                + (
                    _verl_lengths(plan.setup, tokens // max(1, s.micro_batch * s.sequences_per_sample), mapped)
                    if mapped.verl is not None
                    else mapped.edit("data.max_length", max(1, tokens // max(1, s.micro_batch * s.sequences_per_sample)))
                )
                + or_fixes,
                "planner",
                origin.line,
            )
        )
    elif mapped.longest_unknown is not None and (shorter := _shorter_that_fits(plan, _shortest_sample(plan))) is not None:
        # batches padded to their longest sample, of data whose lengths are not known: planned at the cap, which does not fit
        tokens, fitting = shorter
        origin = mapped.longest_unknown
        findings.append(
            Finding(
                "warning",
                origin.file,
                origin.key,
                f"does not fit if a batch holds a sample as long as the cap: planned at the cap, {plan.setup.micro_batch} x "
                f"{plan.setup.seq_len:,} tokens, because each batch is padded to its longest sample and the data's lengths are "
                f"not known: {over}; it fits while no sample exceeds {tokens:,} tokens ({fitting.per_gpu_peak_gib:.1f} GiB)",
                f"check your data's longest samples (images included), or pass --sample-length N to plan at them; to bound "
                f"them, {mapped.edit('data.max_length', tokens)}{or_fixes}",
                "planner",
                origin.line,
            )
        )
    elif mapped.deepspeed_from_name is not None and not mapped.deepspeed_from_name[2] and _most_offload(plan)[0] <= plan.usable_gib:
        # the DeepSpeed JSON was not found and its name says a ZeRO stage and no offload: planned without offload, an upper
        # bound of each GPU's memory, since offload in the JSON (which the name may not say) only lowers it; with the most
        # offload the stage allows it fits, so the JSON decides
        json_name, origin, _ = mapped.deepspeed_from_name
        findings.append(
            Finding(
                "warning",
                origin.file,
                origin.key,
                f"does not fit as planned from the DeepSpeed JSON's name ({json_name}, not found: ZeRO stage "
                f"{plan.setup.zero.stage} without offload, DeepSpeed's defaults otherwise): {over}; the verdict depends on the "
                "JSON's offload settings (offload_optimizer / offload_param), which only lower it",
                f"pass the JSON as another PATH to review it: vramfit review {file} path/to/{json_name}{or_fixes}",
                "planner",
                origin.line,
            )
        )
    elif mapped.launch_unknown is not None and plan.setup.engine in ("ddp", "single") and (sharded := _under_zero3(plan)) <= plan.usable_gib:
        # a settings file alone, naming no sharding: planned as plain data parallel, which does not fit; its launcher's
        # accelerate config (not given) may shard it, and under ZeRO-3 over the same GPUs it fits: the launch decides
        origin = mapped.launch_unknown
        findings.append(
            Finding(
                "warning",
                origin.file,
                origin.key,
                f"does not fit as plain data parallel, which is how this file reads alone (it names no DeepSpeed JSON or FSDP, "
                f"and no launch script or accelerate config was given): {over}; under ZeRO-3 over the same GPUs it fits "
                f"({sharded:.1f} GiB), so the launch decides (`accelerate launch --config_file` with DeepSpeed or FSDP shards it)",
                f"review the launch with its accelerate config: vramfit review run.sh accelerate_config.yaml {file}{or_fixes}",
                "planner",
                origin.line,
            )
        )
    elif mapped.sharding_assumed:
        # the run shards the model or the sequence in ways the planner does not model: the plan is an upper bound
        what, origin = mapped.sharding_assumed
        findings.append(
            Finding(
                "warning",
                origin.file,
                origin.key,
                f"does not fit as planned, without {what}, which the planner does not model: {over}; the run holds less "
                "on each GPU than planned (the verdict is an upper bound)",
                f"measure the first steps (torch.cuda.max_memory_allocated) before a long run{or_fixes}",
                "planner",
                origin.line,
            )
        )
    elif mapped.optimizer_assumed and _without_update_state(plan) <= plan.usable_gib:
        # the update scheme keeps less than the AdamW states (and gradients) planned: the verdict is an upper bound
        what, origin = mapped.optimizer_assumed
        findings.append(
            Finding(
                "warning",
                origin.file,
                origin.key,
                f"does not fit if every trainable weight keeps AdamW states and gradients: {over}; "
                f"{what} keeps less, which the planner does not model (without optimizer states and gradients: "
                f"{_without_update_state(plan):.1f} GiB)",
                f"measure the first steps (torch.cuda.max_memory_allocated) before a long run{or_fixes}",
                "planner",
                origin.line,
            )
        )
    else:
        fixes = [f for f in (pin_fix, _fixes(plan, mapped)) if f]
        if (mixers := _torch_path_mixers(plan)) is not None:
            # traced on the torch fallback of a sequence mixer (what transformers runs without the mixer's kernels): said
            names, packages = mixers
            over += (
                f"; the activations are those of the torch fallback of {names}, the path transformers takes when neither the "
                f"`kernels` package's Hub kernels nor {packages} are installed; with them the run keeps less (--mixer-kernels fused plans it)"
            )
            fixes.append(f"install {packages} and measure the first steps (torch.cuda.max_memory_allocated)")
        if mapped.deepspeed_from_name is not None and not mapped.deepspeed_from_name[2]:
            # planned from the missing JSON's name without offload, and it does not fit even with the most offload the
            # stage allows, at any bucket size: whatever the JSON offloads, the run does not fit
            least, what = _most_offload(plan)
            over += (
                f"; planned from the DeepSpeed JSON's name ({mapped.deepspeed_from_name[0]}, not found) without offload, and "
                f"with {what} ({least:.1f} GiB without ZeRO's communication buckets) it does not fit either, so the "
                "JSON's offload settings do not change the verdict"
            )
        findings.append(Finding("error", file, "--gpu", over, "; or ".join(fixes), "planner"))
    if pinned is not None:
        _attention_readings(recipe, plan, pinned, mapped, findings)
    if mapped.length_cap:
        findings.append(_at_the_cap(plan, mapped))
    if "evaluation" in plan.phases and plan.phases["evaluation"] > plan.phases.get("train", 0.0):
        ev = plan.phase_breakdowns["evaluation"]
        kept = f", {ev['eval_logits']:.1f} GiB of it kept eval logits" if ev.get("eval_logits") else ""
        origin = mapped.origin("training.eval_steps" if "training.eval_steps" in mapped.origins else "training.eval_strategy")
        over = plan.phases["evaluation"] > plan.usable_gib
        # where training itself does not fit, the run stops at its first step, before any evaluation: the training
        # verdict is the fault, and this the next one its fixes must also clear - said, not raised as a second error
        first = plan.phases.get("train", 0.0) > plan.usable_gib
        # the sequence split is planned for training only: an evaluation under sequence parallelism is an upper bound
        unsplit = max(1, plan.setup.sequence_parallel) > 1
        # a DeepSpeed JSON planned from its name without offload: an upper bound in evaluation too (offload_param lowers it)
        by_name = mapped.deepspeed_from_name is not None and not mapped.deepspeed_from_name[2]
        findings.append(
            Finding(
                ("warning" if unsplit or by_name else "error") if over and not first else "info",  # within the card: said, not warned
                origin.file,
                origin.key,
                f"evaluation peaks above training: {plan.phases['evaluation']:.1f} GiB per GPU in evaluation against "
                f"{plan.phases['train']:.1f} GiB in training{kept}; every evaluation is the run's highest point"
                + ("; training does not fit first, so fix that, then this" if over and first else "")
                + (
                    f"; evaluation is planned without the sequence split over {plan.setup.sequence_parallel} GPUs, which the "
                    "planner applies to training only (an upper bound)"
                    if unsplit
                    else ""
                )
                + (
                    f"; planned from the DeepSpeed JSON's name ({mapped.deepspeed_from_name[0]}, not found) without offload, "
                    "an upper bound: the verdict depends on the JSON's offload settings"
                    if by_name and over and not first
                    else ""
                ),
                # prediction_loss_only helps only where logits are kept; the eval batch always
                "; or ".join(
                    mapped.edit(_key(k), v)
                    for k, v in {"prediction_loss_only": True, "per_device_eval_batch_size": 1}.items()
                    if k != "prediction_loss_only" or ev.get("eval_logits")
                ),
                "planner",
                origin.line,
            )
        )
    host = ", ".join(f"{k.replace('_', ' ')} {v:.0f}" for k, v in plan.host_breakdown.items() if v >= 0.5)
    if plan.host_ram_available_gib is None:
        findings.append(
            Finding(
                "info",
                file,
                "--host-ram-gib",
                f"predicted host RAM {plan.host_ram_gib:.0f} GiB per node ({host}); node size not given, not checked",
                "pass --host-ram-gib N to check it against your nodes.",
                "planner",
            )
        )
    elif not plan.host_ram_fits:
        findings.append(
            Finding(
                "error",
                file,
                "--host-ram-gib",
                f"predicted host RAM {plan.host_ram_gib:.0f} GiB per node ({host}) exceeds "
                f"the {plan.host_ram_available_gib:g} GiB of a node (95% usable): a rank is killed, often reported as a CUDA OOM",
                _fixes(plan, mapped) or "nodes with more RAM, or less offload to host RAM.",
                "planner",
            )
        )
    if recipe.method == "grpo" and mapped.verl is None:  # verl's micro-batch counts sequences: one meaning
        _generations(recipe, plan.setup, mapped, findings)
    return plan


def _pinned_attention(recipe, mapped: mapping.Mapped):
    """(reading, table entry) where the transformers release the repository pins decides the model's default attention
    or allows both kinds (review/default_attention.py): 'eager' or 'both'; None where nothing is pinned, the files choose
    the attention, the model type is not in the table, or every release the pin allows picks SDPA."""
    from vramfit.review import default_attention

    pin = mapped.transformers_pin
    torch_eager = default_attention.torch_without_sdpa(recipe.planner.torch_version)
    if (pin is None and not torch_eager) or recipe.model.attn_implementation != "sdpa":
        return None
    if mapping._remote_code_only(str(recipe.model.id or "")):  # its repository's own code picks its attention
        return None
    model_type = default_attention.text_model_type(_json(recipe.path(recipe.model.config)))
    if model_type is None:
        return None
    if mapped.attention_chosen is not None and (mapped.attention_chosen_for is None or model_type in mapped.attention_chosen_for):
        return None
    if torch_eager and model_type in default_attention.TABLE:  # no transformers release runs SDPA on this torch
        return "torch", default_attention.TABLE[model_type]
    reading = default_attention.reading(model_type, pin)
    return (reading, default_attention.TABLE[model_type]) if reading in ("eager", "both") else None


def _eager(recipe):
    from vramfit.planner.plan import with_overrides

    return with_overrides(recipe, {"model.attn_implementation": "eager"})


def _eager_what(entry) -> str:
    first, last = entry.eager
    return (
        f"{entry.label}'s attention is eager (transformers {first} to {last} load it without SDPA unless attn_implementation "
        f"is given: heads x T x T scores per layer, softmaxed in fp32; SDPA from {entry.sdpa}: {entry.source.split(';')[0]})"
    )


def _pinned(mapped: mapping.Mapped) -> str:
    pin = mapped.transformers_pin
    return f"planned under {pin} (--transformers-version)" if pin.file.startswith("--") else f"this repository pins {pin}"


def _pinned_eager(pinned, mapped: mapping.Mapped) -> str:
    if pinned[0] == "torch":
        from vramfit.review import default_attention

        return (
            f"planned under torch {mapped.recipe['planner']['torch_version']} (--torch-version), where {pinned[1].label}'s attention "
            f"is eager whatever the transformers release ({default_attention.SDPA_TORCH_SOURCE}; heads x T x T scores per layer, "
            "softmaxed in fp32)"
        )
    return f"{_pinned(mapped)}, where {_eager_what(pinned[1])}"


def _pinned_fixes(pinned, mapped: mapping.Mapped) -> str:
    entry = pinned[1]
    if pinned[0] == "torch":
        return f"with torch >= 2.1.1 and transformers >= {entry.sdpa}, attention runs SDPA by default"
    pin = mapped.transformers_pin
    where = "" if pin.file.startswith("--") else f" in {pin.file.rsplit('/', 1)[-1]}"
    return f'pin transformers>={entry.sdpa}{where} (SDPA by default), or load the model with attn_implementation="sdpa"'


def _attention_readings(recipe, plan, pinned, mapped: mapping.Mapped, findings: list[Finding]) -> None:
    """The pin decides eager: say the plan is eager where it fits (the no-fit finding above says it already). The pin
    allows both: plan the eager reading beside the SDPA one; a warning naming both where only the eager one does not
    fit, a note where both fit."""
    from vramfit.planner import plan_recipe

    reading, entry = pinned
    file = mapped.primary.label
    if reading in ("eager", "torch"):
        if plan.fits:
            findings.append(
                Finding(
                    "info",
                    file,
                    "--gpu",
                    f"{_pinned_eager(pinned, mapped)}: planned with eager attention ({plan.per_gpu_peak_gib:.1f} GiB per GPU)",
                    source="planner",
                )
            )
        return
    if not plan.fits:
        return  # the SDPA reading does not fit already: the eager one holds more
    try:
        eager_recipe = _eager(recipe)
        eager = _plan_with_settings(eager_recipe, mapped, []) or plan_recipe(eager_recipe)
    except (ConfigError, ValueError, TypeError):
        return
    head = (
        f"{_pinned(mapped)}, which allows releases where {_eager_what(entry)}: planned with SDPA "
        f"(the default from {entry.sdpa}) the peak is {plan.per_gpu_peak_gib:.1f} of {plan.gpu_memory_gib:.1f} GiB per GPU; "
        f"with eager attention it is {eager.per_gpu_peak_gib:.1f} GiB"
    )
    if eager.fits:
        findings.append(Finding("info", file, "--gpu", f"{head}: it fits either way", source="planner"))
        return
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in eager.breakdown.items() if v >= 0.05)
    findings.append(
        Finding(
            "warning",
            file,
            "--gpu",
            f"{head}, which does not fit the {eager.gpu_memory_gib:.1f} GiB of each {recipe.hardware.gpu}, in {eager.peak_phase} ({parts})",
            "; or ".join(f for f in (_pinned_fixes(pinned, mapped), _fixes(eager, mapped)) if f),
            "planner",
        )
    )


def _without_update_state(plan) -> float:
    """The peak phase's GiB less its optimizer states, optimizer-step temporaries and gradients: what a run needs at
    least whatever its update scheme keeps."""
    parts = plan.phase_breakdowns.get(plan.peak_phase, plan.breakdown)
    dropped = sum(parts.get(k, 0.0) for k in ("optimizer_states", "optimizer_step", "gradients"))
    return plan.per_gpu_peak_gib - dropped


def _under_zero3(plan) -> float:
    """GiB per GPU of `plan` under DeepSpeed ZeRO-3 with DeepSpeed's defaults (no offload) over the same GPUs."""
    from vramfit.planner import params
    from vramfit.planner.plan import plan as plan_setup
    from vramfit.planner.setup import Zero, _hidden_size

    hidden = _hidden_size(params.read_config(plan.setup.model_config))
    zero = Zero.from_json({"zero_optimization": {"stage": 3}}, hidden)
    return plan_setup(plan.setup.replace(engine="deepspeed", zero=zero)).per_gpu_peak_gib


def _most_offload(plan) -> tuple[float, str]:
    """(GiB per GPU, what) of `plan` with the most offload its ZeRO stage allows (stage 1 / 2: the optimizer; 3: the
    optimizer and the parameters; 0: none) and without ZeRO's communication buckets (a JSON may set them small): what a
    DeepSpeed JSON of that stage needs at least, whatever its offload settings."""
    import dataclasses

    from vramfit.planner.plan import plan as plan_setup

    zero = plan.setup.zero
    if zero.stage == 0:
        least, what = plan, "no offload (ZeRO stage 0 offloads nothing)"
    else:
        least = plan_setup(plan.setup.replace(zero=dataclasses.replace(zero, offload_optimizer=True, offload_params=zero.stage == 3)))
        what = (
            "the optimizer and the parameters offloaded" if zero.stage == 3 else f"the optimizer offloaded (ZeRO stage {zero.stage} cannot offload parameters)"
        )
    buffers = least.phase_breakdowns.get(least.peak_phase, least.breakdown).get("zero_buffers", 0.0)
    return least.per_gpu_peak_gib - buffers, what


def _plan_with_settings(recipe, mapped: mapping.Mapped, findings: list[Finding]):
    """The plan with the planner settings the files ask for and the recipe schema cannot say: those planner.Setup has are
    applied (engine fsdp, FSDP offload, DeepSpeed's fp32 master weights at stage 0), the others are named as not planned yet; fixes are
    searched with the settings applied to each candidate."""
    import dataclasses

    from vramfit.planner.plan import plan as plan_setup
    from vramfit.planner.setup import Setup

    if not mapped.planner_settings:
        return None
    setup = Setup.from_recipe(recipe)
    names = {f.name for f in dataclasses.fields(Setup)}
    wanted = dict(mapped.planner_settings)
    applied, missing = {}, []
    if wanted.pop("offload", False):
        if wanted.get("engine") == "fsdp" or setup.engine == "fsdp":
            setup = dataclasses.replace(setup, zero=dataclasses.replace(setup.zero, offload_params=True, offload_optimizer=True))
            applied["FSDP CPU offload"] = True
    for name, value in wanted.items():
        if name in names:
            setup = dataclasses.replace(setup, **{name: value})
            applied[name] = value
        else:
            missing.append(name)
    for name in missing:
        o = mapped.planner_origins.get(name) or mapping.Origin(mapped.primary.label, "")
        findings.append(
            Finding(
                "info",
                o.file,
                o.key,
                f"{name.replace('_', ' ')}: read, but the planner cannot plan it yet; the memory plan leaves it out",
                source="planner",
                line=o.line,
            )
        )
    if applied:
        o = mapped.planner_origins.get("engine") or mapping.Origin(mapped.primary.label, "")
        findings.append(
            Finding(
                "info",
                o.file,
                o.key,
                "planned with " + ", ".join(f"{k} {v}" if v is not True else k for k, v in applied.items()) + " (the files' sharding; the fixes below keep it)",
                source="planner",
                line=o.line,
            )
        )
        result = plan_setup(setup)
        if not result.ok:  # the fixes, each re-planned with the files' settings applied too
            from vramfit.planner.fixes import search
            from vramfit.planner.plan import with_overrides

            def replan(overrides):
                return plan_setup(_apply(Setup.from_recipe(with_overrides(recipe, overrides)), mapped.planner_settings, names))

            result.fixes = search(result, replan, mode="recipe", recipe=recipe)
            result.fixes_searched = True
            litgpt_step = _litgpt_one_micro_batch(recipe, mapped, replan)
            if litgpt_step is not None:
                result.fixes.insert(0, litgpt_step)
        return result
    return None  # nothing the planner can apply: the recipe's own plan, with its fixes


def _litgpt_one_micro_batch(recipe, mapped: mapping.Mapped, replan) -> dict | None:
    """A LitGPT run sharded with FSDP that accumulates holds the unsharded gradients through every micro-batch but a
    step's last (no_backward_sync): one micro-batch per step (train.global_batch_size = micro-batch x GPUs) keeps
    only their shards. The fix, where that fits; None otherwise."""
    t = recipe.training
    if mapped.litgpt is None or not t.get("fsdp") or t.get("gradient_accumulation_steps", 1) <= 1:
        return None
    step = t["per_device_train_batch_size"] * recipe.world_size
    try:
        plan = replan({"gradient_accumulation_steps": 1, "global_batch_size": step})
    except ConfigError:
        return None
    if not plan.ok:
        return None
    return {
        "overrides": {"global_batch_size": step},
        "per_gpu_peak_gib": plan.per_gpu_peak_gib,
        "host_ram_gib": plan.host_ram_gib,
        "why": "one micro-batch per step: FSDP reduce-scatters every backward, no unsharded gradients kept",
    }


def _apply(setup, settings: dict, names: set):
    """`setup` with the files' planner settings that planner.Setup has."""
    import dataclasses

    wanted = dict(settings)
    if wanted.pop("offload", False) and (wanted.get("engine") == "fsdp" or setup.engine == "fsdp"):
        setup = dataclasses.replace(setup, zero=dataclasses.replace(setup.zero, offload_params=True, offload_optimizer=True))
    return dataclasses.replace(setup, **{k: v for k, v in wanted.items() if k in names})


def _key(name: str) -> str:
    """A planner override key as a recipe key path."""
    if name.startswith(("data.", "model.", "hardware.", "env.")) or name in ("deepspeed", "global_batch_size"):
        return name
    return f"training.{name}"


# ms-swift's --deepspeed presets (swift/llm/ds_config/) by the vramfit preset that holds the same ZeRO settings
_SWIFT_PRESETS = {
    "zero2.json": "zero2",
    "zero3.json": "zero3",
    "zero2_offload_optimizer.json": "zero2_offload",
    "zero3_offload_optimizer_params.json": "zero3_offload",
}


def _deepspeed_edit(mapped: mapping.Mapped, value: str) -> str | None:
    """A vramfit DeepSpeed preset written as the launch names its ZeRO: the JSON path where the files name one, the flags
    of a launch that names a stage instead (DeepSpeed-Chat / OpenRLHF `--zero_stage N` with their offload switches, an
    ms-swift preset name); None where those flags cannot say the preset's settings."""
    import re

    origin = mapped.origins.get("deepspeed")
    match = re.search(r"zero(\d)(_offload_optimizer)?(_params)?\.json$", str(value))
    if origin is None or match is None or origin.key not in ("--zero_stage", "--ds.zero_stage", "--deepspeed", "--deepspeed_stage"):
        return f"{mapped.edit('deepspeed', value)} (vramfit's preset)"
    stage, optimizer, params = int(match.group(1)), bool(match.group(2)), bool(match.group(3))
    if origin.key == "--deepspeed":  # a JSON path; ms-swift's preset name where the launch names its ZeRO by one
        name = _SWIFT_PRESETS.get(Path(str(value)).name)
        named = "(ms-swift preset " in (mapped.deepspeed_label or "")
        return f"--deepspeed {name}" if name and named else f"{mapped.edit('deepspeed', value)} (vramfit's preset)"
    words = [f"{origin.key} {stage}"]
    if (mapped.primary.program or "").removeprefix("-m ").replace("/", ".").startswith("openrlhf."):
        if params:
            return None  # OpenRLHF offloads the optimizer only (--adam_offload)
        if optimizer:
            words.append("--ds.adam_offload" if origin.key.startswith("--ds.") else "--adam_offload")
    elif origin.key == "--deepspeed_stage":  # open-instruct: a switch for each offload
        words += [*(["--deepspeed_offload_optimizer"] if optimizer else []), *(["--deepspeed_offload_param"] if params else [])]
    elif optimizer or params:
        if stage == 3 and not params:
            return None  # DeepSpeed-Chat's --offload moves the parameters too
        words.append("--offload")
    return " ".join(words)


def _fixes(plan, mapped: mapping.Mapped) -> str:
    out = []
    for fix in plan.fixes:
        edits = []
        if "deepspeed" in fix["overrides"] and _deepspeed_edit(mapped, fix["overrides"]["deepspeed"]) is None:
            continue
        derived = "litgpt" if mapped.litgpt is not None else "llmfoundry" if mapped.llmfoundry is not None else None
        derived = "verl" if mapped.verl is not None else derived  # verl derives the accumulation from the mini-batch
        if derived is not None:
            # a LitGPT config / an llm-foundry YAML derives the accumulation from its global batch, which the fix keeps; a
            # fix that needs a setting the format has no key for (DeepSpeed, Liger) is not one its user can write
            overrides = {k: v for k, v in fix["overrides"].items() if k != "gradient_accumulation_steps"}
            if not overrides or any(mapping.spelled(derived, _key(k)).startswith("(") or k.startswith("env.") for k in overrides):
                continue
        for name, value in fix["overrides"].items():
            if derived is not None and name == "gradient_accumulation_steps":
                continue
            if name.startswith("env."):
                edits.append(f"export {name[4:]}={value}")
            elif name == "deepspeed":
                edits.append(_deepspeed_edit(mapped, value))
            else:
                edits.append(mapped.edit(_key(name), value))
        out.append(
            f"{' '.join(edits) if mapped.settings.kind == 'shell' else ', '.join(edits)} (predicted {fix['per_gpu_peak_gib']:.1f} GiB per GPU, "
            f"host {fix['host_ram_gib']:.0f} GiB: {fix['why']})"
        )
    return "; or ".join(out)


def _generations(recipe, setup, mapped: mapping.Mapped, findings: list[Finding]) -> None:
    """GRPO: sequences per GPU under TRL's semantics and under the older VLM-R1 / open-r1 one."""
    from vramfit import recipe as recipe_mod
    from vramfit.libraries import grpo_generation_batch
    from vramfit.planner import plan_recipe

    micro, g = setup.micro_batch, setup.num_generations
    origin = mapped.origin("training.per_device_train_batch_size")
    old = micro * g
    if _trl_own_script(mapped):
        return  # TRL's own script: only TRL's semantics apply
    ranks = recipe.world_size
    per_step = grpo_generation_batch(micro, ranks, 1, steps_per_generation=1)  # completions per micro-step, all ranks
    pin = mapped.trl_pin
    counts_completions = _trl_counts_completions(pin)
    if counts_completions:  # the pinned TRL has one meaning: the plan above is the run's
        findings.append(
            Finding(
                "info",
                origin.file,
                origin.key,
                f"this repository pins {pin}, where per_device_train_batch_size counts completions (TRL 0.15 and later, "
                f"huggingface/trl#2776): {micro} sequences per GPU per forward, {per_step} completions = "
                f"{per_step // g if per_step % g == 0 else per_step / g} prompts x {g} per micro-step on {ranks} ranks",
                "",
                "planner",
                origin.line,
            )
        )
        return
    what = (
        f"{micro} sequences per GPU per forward under TRL's semantics (per_device_train_batch_size counts completions: "
        f"{per_step} completions = {per_step // g if per_step % g == 0 else per_step / g} prompts x {g} per micro-step "
        f"on {ranks} ranks); {old} under the semantics of VLM-R1 / open-r1 before the TRL change (each of the {micro} prompts "
        f"expanded to {g} completions)"
    )
    try:
        old_recipe = recipe_mod.load(
            recipe.source, [f"per_device_train_batch_size={old}", f"global_batch_size={old * setup.gradient_accumulation_steps * ranks}"]
        )
        old_plan = plan_recipe(old_recipe, fixes=False)
    except ConfigError:
        findings.append(Finding("info", origin.file, origin.key, what, "", "planner", origin.line))
        return
    verdict = "fits" if old_plan.fits else f"does not fit the {old_plan.gpu_memory_gib:.1f} GiB card"
    severity = "info" if old_plan.fits else "error" if counts_completions is False else "warning"
    if counts_completions is False:  # the pinned TRL expands every prompt: the older semantics is the run's
        what = f"this repository pins {pin}, before per_device_train_batch_size counted completions (TRL 0.15): {what}"
    fix = (
        ""
        if old_plan.fits or micro < 2
        else (
            f"with a checkout from before the change, divide per_device_train_batch_size by "
            f"num_generations: {mapped.edit('training.per_device_train_batch_size', max(1, micro // g))}"
        )
    )
    findings.append(
        Finding(
            severity,
            origin.file,
            origin.key,
            f"{what}; planned with {old} sequences per GPU: {old_plan.per_gpu_peak_gib:.1f} GiB, {verdict}",
            fix,
            "planner",
            origin.line,
        )
    )


def _at_the_cap(plan, mapped: mapping.Mapped) -> Finding:
    """The step was planned at the data's longest sample (batches padded to their longest sample): the cap the files set,
    planned beside it. Over the card there, a warning where the data's figure is the longest of those read, a note where
    no sample can exceed it (a published bound: the cap is never reached)."""
    from vramfit.planner.plan import plan as plan_setup

    cap, planned = mapped.length_cap, plan.setup.seq_len
    at_cap = plan_setup(plan.setup.replace(seq_len=cap))
    where = mapped.origin("data.max_length")
    head = f"at the cap of {cap:,} tokens the peak would be {at_cap.per_gpu_peak_gib:.1f} GiB per GPU"
    if at_cap.fits:
        return Finding("info", where.file, where.key, f"{head}: it fits there too", source="planner", line=where.line)
    over = f"{head}, over the {plan.gpu_memory_gib:.1f} GiB of each {mapped.recipe['hardware']['gpu']}"
    fix = f"{mapped.edit('data.max_length', planned)} so that no batch can exceed what was planned"
    if mapped.length_bound:
        return Finding(
            "info", where.file, where.key, f"{over}; no sample of this data reaches it: the verdict uses {planned:,}", source="planner", line=where.line
        )
    return Finding(
        "warning",
        where.file,
        where.key,
        f"{over}: a sample longer than the {planned:,} tokens planned (the longest of those read) would not fit",
        fix,
        "planner",
        where.line,
    )


def _shorter_that_fits(plan, floor: int = 256):
    """(tokens per sample, plan) for the longest sample, halving from the planned length down to `floor` tokens, at which
    the run fits; None when none does (then the verdict stands whatever the data)."""
    from vramfit.planner.plan import plan as plan_setup

    setup = plan.setup
    seq = setup.seq_len
    # verl's GRPO sample is prompt + response, the response the larger part: both shrink together
    whole = setup.method == "grpo" and setup.grpo_whole_logits
    while seq // 2 >= floor or (whole and seq // 2 >= 1 and (seq + setup.max_completion_length) // 2 >= floor):
        seq //= 2
        changes = {"seq_len": seq, "typical_seq_len": None}
        if whole:
            changes["max_completion_length"] = max(1, setup.max_completion_length * seq // setup.seq_len)
        shorter = plan_setup(setup.replace(**changes))
        if shorter.fits:
            return (seq + changes.get("max_completion_length", 0)), shorter
    return None


def _verl_lengths(setup, per_sample: int, mapped: mapping.Mapped) -> str:
    """verl's prompt and response caps for `per_sample` tokens, in the planned proportion (_shorter_that_fits)."""
    response = max(1, setup.max_completion_length * per_sample // max(1, setup.seq_len + setup.max_completion_length))
    return f"{mapped.edit('data.max_length', max(1, per_sample - response))} {mapped.edit('training.max_completion_length', response)}"


def _padding_free_tokens_that_fit(plan):
    """(tokens per micro-batch, plan) for the largest padding-free micro-batch at which the run fits (`_shorter_that_fits`)."""
    found = _shorter_that_fits(plan)
    # every sequence of the micro-batch: chosen + rejected, an embedding / reranker sample's group (sequences_per_sample)
    return None if found is None else (plan.setup.micro_batch * plan.setup.sequences_per_sample * found[0], found[1])


def _shortest_sample(plan) -> int:
    """The fewest tokens a sample of the run holds for sure: its images' tokens (a VLM's samples carry them), at least 256."""
    s = plan.setup
    return max(256, s.images_per_sample * s.image_tokens)


# The packages whose CUDA kernels transformers uses for a sequence mixer instead of its torch fallback (the
# `use_kernel_func_from_hub_with_fallback` decorators: Hub kernels, then the original package, then torch): the
# mixers of MambaMixer / Mamba2Mixer (models/mamba*/modeling_*.py: "mamba_ssm", "causal_conv1d") and of the gated
# delta rule (models/qwen3_next/modeling_qwen3_next.py: "fla", with causal_conv1d's short convolution).
MIXER_KERNELS = (("Mamba", "mamba-ssm and causal-conv1d"), ("DeltaNet", "flash-linear-attention and causal-conv1d"))


def _torch_path_mixers(plan) -> tuple[str, str] | None:
    """(the text layers' sequence mixers, the packages of their kernels) when the plan's activations were traced on
    their torch fallback (the CPU trace cannot run the kernels; trace.py sizes these layers by tracing them), else None."""
    from vramfit.planner import params

    try:
        stack = params.summary(plan.setup.model_config).stacks.get("text")
    except Exception:  # a model the summary cannot build was planned otherwise: nothing traced on a fallback
        return None
    if getattr(plan.setup, "mixer_kernels", "torch") == "fused":
        return None  # planned with the kernels (planner/mixer_kernels.py), not their fallback
    mixers = [m for m in (stack.mixers if stack is not None else ()) if any(part in m for part, _ in MIXER_KERNELS)]
    if not mixers:
        return None
    packages = next(pkgs for part, pkgs in MIXER_KERNELS if part in mixers[0])
    return ", ".join(mixers), packages


def _largest_image_that_fits(plan):
    """(tokens per image, max_pixels, plan) for the largest image size, halving from the planned maximum down to 256 tokens,
    at which the run fits; None when none does (then the verdict stands whatever the images)."""
    import dataclasses

    from vramfit.planner import params
    from vramfit.planner.plan import plan as plan_setup
    from vramfit.planner.setup import _patch_size, image_geometry

    setup = plan.setup
    if not setup.images_per_sample or not setup.image_tokens:
        return None
    try:
        arch = params.summary(setup.model_config)
    except Exception:  # the plan above summarised it; a failure here only means no smaller size is offered
        return None
    sizes = []
    tokens = setup.image_tokens
    while tokens > 256:
        tokens //= 2
        sizes.append(tokens)

    img = arch.image
    side = int(_patch_size(img)) * int(img.get("spatial_merge_size") or 2)  # px per token side: 28 (Qwen2-VL), 32 (Qwen3-VL)
    per_token = side * side

    def at(tokens):
        t, patches = image_geometry(arch, tokens * per_token, None)
        shrinks = setup.method == "grpo" or setup.images_past_max_length  # image tokens on top of the text
        seq = setup.seq_len - setup.images_per_sample * (setup.image_tokens - t) if shrinks else setup.seq_len
        return t, plan_setup(dataclasses.replace(setup, image_tokens=t, vision_patches=patches, seq_len=max(1, seq)))

    # the smallest first: the memory grows with the image, so when the smallest does not fit, no size does (one plan, not
    # one per halving: each can be a trace of its own)
    if not sizes or not at(sizes[-1])[1].fits:
        return None
    for tokens in sizes:
        t, smaller = at(tokens)
        if smaller.fits:
            return t, tokens * per_token, smaller
    return None


def _trl_counts_completions(pin) -> bool | None:
    """Whether the pinned TRL's GRPO counts completions in per_device_train_batch_size (0.15 and later, huggingface/trl#2776):
    True / False where the pin decides it, None where nothing is pinned or the pin allows both."""
    if pin is None:
        return None
    try:
        parts = tuple(int(p) for p in pin.version.split(".")[:2])
    except ValueError:
        return None
    new = parts >= (0, 15) or parts[0] >= 1
    if pin.op in ("==", "~="):
        return new
    if pin.op == ">=":
        return True if new else None
    if pin.op == "<=":
        return False if not new else None
    return None


def _summary(mapped: mapping.Mapped, ds: dict[str, Any], ref, why: str) -> list[str]:
    r = mapped.recipe
    split = (r.get("planner") or {}).get("device_map_gpus") or 1  # GPUs each process spreads the model over (device_map)
    hw = r["hardware"]
    t = r["training"]
    host = f", {hw['host_ram_gib']:g} GiB host RAM per node" if "host_ram_gib" in mapped.stated else ""
    ranks = hw["gpus_per_node"] * hw["nodes"]
    micro, accum = t.get("per_device_train_batch_size", 8), t.get("gradient_accumulation_steps", 1)
    total = micro * accum * ranks if all(isinstance(v, int) for v in (micro, accum)) else "?"
    config = (
        "config not found: memory not planned"
        if mapped.model_missing and mapped.recipe["model"]["config"].endswith(str(mapping.STAND_IN.name)) and mapped.model_how == "stand-in"
        else Path(r["model"]["config"]).name
    )
    if mapped.model_by_name is not None:  # a local folder not here, planned as the table model its name names
        config = f"{config}: {mapped.model_by_name[1]}, by the folder's name"
    named = r["model"]["id"] if "model.id" in mapped.origins else "no model the files name"  # not the stand-in's id
    if mapped.litgpt is not None:  # Lightning Fabric starts the ranks and shards (mapping.litgpt_strategy)
        how = f"{mapped.litgpt.program} on Lightning Fabric, " + ("FSDP full shard" if t.get("fsdp") else "no sharding")
    elif mapped.verl is not None:  # Ray starts one worker per GPU; the actor under FSDP, its rollout engine beside it
        rollout = "vLLM" if t.get("use_vllm") else "transformers generate"
        how = f"verl main_ppo on Ray, FSDP{' ' + t['fsdp'].split()[0] if t.get('fsdp') else ''} actor with {rollout} colocated"
    elif mapped.llmfoundry is not None:  # Composer starts the ranks and shards (mapping.llmfoundry_strategy)
        how = f"{mapped.llmfoundry.program} on Composer, " + (f"FSDP {t['fsdp'].split()[0]}" if t.get("fsdp") else "no sharding")
    else:
        launcher = "python (one process)" if mapped.one_process is not None else "mpirun" if mapped.primary.launcher == "mpi" else r["launcher"]
        how = f"{launcher}, {reference.zero_label(ds)} ({mapped.deepspeed_label})"
    lines = [
        f"read as: {r['method']} of {named} ({config}), {how}",
        f"hardware: {hw['nodes']} node{'s' if hw['nodes'] > 1 else ''} x {hw['gpus_per_node'] * split} x {hw['gpu']}{host}"
        + (
            f" (device_map: {hw['gpus_per_node']} process{'es' if hw['gpus_per_node'] > 1 else ''} per node, each spreading the model over {split} GPUs)"
            if split > 1
            else ""
        ),
        f"batch: {micro} per GPU x {accum} accumulation x {ranks} ranks = {total}"
        + (
            f" (the files, as written for {mapped.script_ranks} ranks: {r['global_batch_size']})"
            if mapped.script_ranks and mapped.script_ranks != ranks
            else ""
        ),
    ]
    if ref is not None:
        lines.append(
            f"closest recipe: {ref.name} ({why})"
            + ("" if reference.comparable(why) else "; another model, so its settings are not compared (--against NAME compares them)")
        )
    return lines
