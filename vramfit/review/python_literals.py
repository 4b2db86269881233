"""What a Python file fixes by its own literals, read with `ast` (never executed): the names it assigns a literal, a
literal's value, an `if` test the file settles, and the branches it leaves to the arguments. Shared by the readers of
Python files (review/sources.py) and of their model loads (review/device_map.py)."""

from __future__ import annotations

from typing import Any


def assigned_literals(tree) -> dict[str, Any]:
    """Names a script assigns a literal to (`training_config = {...}`, `checkpoint_path = "microsoft/Phi-3-mini-4k-instruct"`,
    `model_kwargs = dict(...)`); a name assigned twice keeps its first literal."""
    import ast

    out: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id not in out:
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "dict" and not value.args:
                value = ast.Dict(keys=[ast.Constant(k.arg) for k in value.keywords if k.arg], values=[k.value for k in value.keywords if k.arg])
            out[node.targets[0].id] = value
    return out


def literal(node, literals: dict[str, Any]) -> Any:
    """A literal value, a name assigned one, or a `torch.bfloat16`-style dtype; raises ValueError otherwise."""
    import ast

    if isinstance(node, ast.Name) and node.id in literals:
        node = literals[node.id]
    if isinstance(node, ast.IfExp):  # `"HuggingFaceTB/SmolVLM-Base" if SMOL else "..."` with SMOL = True: the branch taken
        return literal(node.body if literal(node.test, literals) else node.orelse, literals)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return node.attr
    if isinstance(node, ast.Dict):
        return {literal(k, literals): literal(v, literals) for k, v in zip(node.keys, node.values) if k is not None}
    return ast.literal_eval(node)


def truth(node, literals: dict[str, Any]) -> bool | None:
    """An `if` test's value where the file fixes it (`USE_QLORA = True`, `USE_QLORA or USE_LORA`, `not SMOL`); None otherwise."""
    import ast

    if isinstance(node, ast.BoolOp):
        values = [truth(v, literals) for v in node.values]
        if isinstance(node.op, ast.Or):
            return True if True in values else False if all(v is False for v in values) else None
        return False if False in values else True if all(v is True for v in values) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = truth(node.operand, literals)
        return None if value is None else not value
    try:
        return bool(literal(node, literals))
    except (ValueError, SyntaxError, TypeError, KeyError, RecursionError):
        return None


def unreached_lines(tree, literals: dict[str, Any]) -> list[tuple[int, int]]:
    """Line ranges of branches the file does not fix as taken: `if args.use_bnb:` runs when the arguments say."""
    import ast

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            taken = truth(node.test, literals)
            if taken is not True:
                out.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
            if taken is not False and node.orelse:
                out.append((node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno))
    return out
