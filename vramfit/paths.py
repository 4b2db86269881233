"""Where things are: the repository root, recipe folders, run directories."""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def _is_tree(folder: Path) -> bool:
    """A vramfit tree: deepspeed_configs/ beside recipes/ (a checkout, or a copy of one) or beside a recipe.yaml (the
    one-recipe tree a review writes). deepspeed_configs/ alone is not one: axolotl's checkout has it, and a review is
    often run from inside such a checkout."""
    return (folder / "deepspeed_configs").is_dir() and ((folder / "recipes").is_dir() or (folder / "recipe.yaml").is_file())


def repo_root(start: Path | None = None) -> Path:
    """The nearest vramfit tree at or above `start` (`_is_tree`); else this package's checkout."""
    if start is not None:
        for folder in [Path(start).resolve(), *Path(start).resolve().parents]:
            if _is_tree(folder):
                return folder
    return PACKAGE_ROOT


def recipes_dir() -> Path:
    return repo_root(Path.cwd()) / "recipes"


def all_recipe_files() -> list[Path]:
    """Every recipe in the tree: the index is the glob, never a hand-kept list."""
    return sorted(recipes_dir().glob("*/recipe.yaml"))


def find_recipe(name_or_path: str) -> Path:
    """`vlm-r1-h20`, `recipes/vlm-r1-h20`, or a path to a folder / recipe.yaml."""
    candidate = Path(name_or_path)
    try:
        if candidate.is_file() or (candidate / "recipe.yaml").is_file():
            return candidate / "recipe.yaml" if candidate.is_dir() else candidate
        by_name = recipes_dir() / name_or_path / "recipe.yaml"
        if by_name.is_file():
            return by_name
        missing = not candidate.exists()
    except (OSError, ValueError):
        return candidate  # a path too long, a NUL byte: the input layer names it when the file is read
    if missing and "/" not in name_or_path and candidate.suffix not in (".yaml", ".yml"):
        from vramfit.problems import ConfigError, Problems, did_you_mean

        names = [p.parent.name for p in all_recipe_files()]
        problems = Problems()
        problems.add(
            name_or_path,
            "",
            f"no recipe named '{name_or_path}' in {recipes_dir()}.{did_you_mean(name_or_path, names)}",
            "see `vramfit list` for the recipes, or pass the path of a recipe.yaml.",
        )
        raise ConfigError(problems)
    return candidate  # let the loader report what is wrong with it
