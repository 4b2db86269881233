"""Read a shell launch script without running it: its variables, its commands, as argv lists.

What a shell would do, done on text: line continuations and comments (a physical-line scanner that
knows quoting), `VAR=...` / `export VAR=...` in order, `$VAR`, `${VAR}`, `${VAR:-default}` and
`$((arithmetic))` expanded where the script defines them, `bash -c '...'` read as a script of its
own, `srun` options kept as hints, redirections dropped, then `shlex` for the words. Anything only
the running shell knows (`$(command)`, positional `$1`, variables the script never sets) stays
unresolved and is visible as such: the value keeps its `$NAME` / `$(...)`.
"""

from __future__ import annotations

import ast
import operator
import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field

UNRESOLVED = re.compile(r"\$(\{[^}]*\}|\(|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?!$-])")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_REDIRECT = re.compile(r"(\d*|&)(>>|>\||>|<)(&\d+|&-)?")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
# `read -r -d '' NAME <<EOF ... EOF`: the here-document's text becomes NAME's value (OpenRLHF's examples keep their
# training command so, then run `deepspeed --module $training_commands`).
_READ_HEREDOC = re.compile(r"^\s*read((?:\s+-[A-Za-z]+(?:\s+(?:''|\"\"))?)*)\s+([A-Za-z_][A-Za-z0-9_]*)\s*<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\4\s*$")
# Words that wrap the real command: dropped, the command after them is the one that runs.
_WRAPPERS = {"nohup", "exec", "time", "command", "builtin", "then", "else", "do", "!"}
_SSH_WITH_VALUE = set("BbcDEeFIiJLlmOoPpQRSWw")  # ssh options that take a value
_DECLARE = {"export", "declare", "local", "readonly", "typeset"}
# srun options written `-x VALUE` / `--long VALUE` (long ones also as `--long=VALUE`).
_SRUN_SHORT = set("ANnpcJtoeqwxCGmDd")
_SRUN_LONG = {
    "nodes",
    "ntasks",
    "ntasks-per-node",
    "gres",
    "gpus",
    "gpus-per-node",
    "gpus-per-task",
    "cpus-per-task",
    "partition",
    "job-name",
    "time",
    "mem",
    "mem-per-cpu",
    "output",
    "error",
    "account",
    "qos",
    "nodelist",
    "exclude",
    "constraint",
    "quotatype",
    "chdir",
    "export",
}
_SRUN_SHORT_NAMES = {"N": "nodes", "n": "ntasks", "p": "partition", "c": "cpus-per-task", "G": "gpus"}


@dataclass
class Command:
    argv: list[str]
    line: int  # first physical line of the command, 1-based
    environment: dict[str, str] = field(default_factory=dict)  # what the process gets: exported variables + `VAR=value cmd`
    srun: dict[str, str] = field(default_factory=dict)  # options of an enclosing `srun`
    cwd: str | None = None  # the working directory a `cd` above it set, where the script says (None: where it is run from)


@dataclass
class Script:
    commands: list[Command]
    variables: dict[str, str]  # as they stand at the end of the script
    exported: set[str]  # what a child process (`bash -c '...'`) sees
    sbatch: dict[str, str]  # `#SBATCH --key=value` directives, long names
    stray: list[tuple[int, list[str]]]  # (line, words): arguments cut off from their command
    bad: list[tuple[int, str, str | None]] = field(default_factory=list)  # (line, `${...}`, variable assigned): bash's "bad substitution"
    unclosed: list[tuple[int, str, str]] = field(default_factory=list)  # (line, quote, flag before it): a quote never closed
    cwd: str | None = None  # after the last `cd` whose target is known (absolute, or relative to where the script runs)


# `$(dirname "$0")`, `$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)`, `$(realpath $(dirname $0))`: the script's folder.
_SCRIPT = r"""["']?(?:\$0|\$\{0\}|\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE|\$\(\s*(?:readlink\s+-f|realpath)\s+["']?(?:\$0|\$\{BASH_SOURCE(?:\[0\])?\})["']?\s*\))["']?"""
_SCRIPT_DIR = re.compile(rf"""^\s*dirname\s+{_SCRIPT}\s*()$|^\s*(?:cd\s+)?["']?\$\(\s*dirname\s+{_SCRIPT}\s*\)(/[\w./-]*)?["']?\s*(?:(?:&&|;)\s*pwd\s*)?$""")
SCRIPT_DIR = "__vramfit_script_dir__"  # a variable parse() sets to the script's folder when the caller knows it


def parse(text: str, variables: dict[str, str] | None = None, first_line: int = 1, script_dir: str | None = None) -> Script:
    lines = list(_logical_lines(text, first_line))
    sbatch = _sbatch([comment for _, _, comment in lines if comment])
    env = dict(variables or {})
    if script_dir:
        env[SCRIPT_DIR] = script_dir
    for key, names in (
        ("nodes", ("SLURM_NNODES", "SLURM_JOB_NUM_NODES")),
        ("ntasks-per-node", ("SLURM_NTASKS_PER_NODE",)),
        ("gpus-per-node", ("SLURM_GPUS_ON_NODE",)),
    ):
        if key in sbatch:
            for name in names:
                env.setdefault(name, sbatch[key])
    script = Script([], env, set(env), sbatch, [])
    depth = 0  # inside `case ... esac`: option parsing (`--model) MODEL=$2; shift 2;;`), whose branches run only for
    for line_no, body, _ in lines:  # arguments given to the script; its defaults above stand
        text = body.strip()
        if re.match(r"case\s", text) and not re.search(r"\besac\b", text):
            depth += 1
            continue
        if depth:
            depth -= bool(re.search(r"(^|[;\s])esac\b", text))
            for name in re.findall(r"(?:^|[\s;)])([A-Za-z_][A-Za-z0-9_]*)=", text):  # set from the script's arguments:
                if not script.variables.get(name):  # a default stands; an empty one (MODEL="") is unknown here
                    script.variables.pop(name, None)
            continue
        if text:
            _run_line(body, line_no, script)
    return script


def _logical_lines(text: str, first_line: int):
    """(first line number, command text without comments, the comment) per logical line."""
    buf: list[str] = []
    start = line = first_line
    quote = None
    heredoc = None
    i, n = 0, len(text)
    physical = text.split("\n")
    while i < n:
        c = text[i]
        if quote == "'":
            buf.append(c)
            quote = None if c == "'" else quote
            line += c == "\n"
            i += 1
            continue
        if c == "\\" and i + 1 == n and quote is None:  # a backslash ending the file: bash drops it (a continuation
            i += 1  # of the last command into nothing; Mantis's scripts end `--resume_from_checkpoint "$x" \\`)
            continue
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":  # continuation, unquoted or inside double quotes
                i += 2
                line += 1
                continue
            buf += [c, text[i + 1]]
            i += 2
            continue
        if quote == '"':
            buf.append(c)
            quote = None if c == '"' else quote
            line += c == "\n"
            i += 1
            continue
        if c in "'\"":
            quote = c
            buf.append(c)
            i += 1
            continue
        if c == "#" and (not buf or buf[-1] in " \t;&|("):
            end = text.find("\n", i)
            end = n if end < 0 else end
            comment = text[i:end] if not "".join(buf).strip() else ""
            yield start, "".join(buf), comment
            buf, i = [], end
            start = line
            continue
        if c == "\n":
            body = "".join(buf)
            if buf:
                yield start, body, ""
            buf = []
            line += 1
            i += 1
            match = _HEREDOC.search(body)
            if match:  # skip the here-document's lines: they are data, not commands
                heredoc = match.group(2)
                data: list[str] = []
                while line - first_line < len(physical) and physical[line - first_line].strip() != heredoc:
                    data.append(physical[line - first_line])
                    i += len(physical[line - first_line]) + 1
                    line += 1
                i += len(physical[line - first_line]) + 1 if line - first_line < len(physical) else 0
                line += 1
                read = _READ_HEREDOC.match(body)
                if read and "-d" in read.group(1).split():  # `read -d ''`: the whole document, not its first line
                    yield start, _assignment(read.group(2), data, quoted=bool(read.group(4)), strip_tabs=bool(read.group(3))), ""
            start = line
            continue
        buf.append(c)
        i += 1
    if buf:
        yield start, "".join(buf), ""


def _assignment(name: str, lines: list[str], quoted: bool, strip_tabs: bool) -> str:
    """`NAME=...` holding a here-document's text as `read -d ''` stores it: with an unquoted delimiter, a backslash-newline
    joins lines and `$VAR`s expand (here, in the assignment); quoted, the text stays as written."""
    text = "\n".join(line.lstrip("\t") if strip_tabs else line for line in lines)
    if quoted:
        return f"{name}='" + text.replace("'", "'\\''") + "'"
    text = re.sub(r"\\\n", "", text)
    return f'{name}="' + text.replace('"', '\\"') + '"'


def _sbatch(comments: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for comment in comments:
        if not comment.startswith("#SBATCH"):
            continue
        words = shlex.split(comment[len("#SBATCH") :], comments=True)
        for i, word in enumerate(words):
            if word.startswith("--"):
                key, _, value = word[2:].partition("=")
                out[key] = value or (words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else "")
            elif word.startswith("-") and len(word) >= 2 and word[1] in _SRUN_SHORT_NAMES:
                value = word[2:] or (words[i + 1] if i + 1 < len(words) else "")
                out[_SRUN_SHORT_NAMES[word[1]]] = value
    gres = re.search(r"gpu(?::[\w-]+)?:(\d+)", out.get("gres", ""))
    if gres and "gpus-per-node" not in out:
        out["gpus-per-node"] = gres.group(1)
    return out


def _run_line(body: str, line_no: int, script: Script) -> None:
    bad = bad_substitution(body)
    if bad is not None:  # bash refuses the command (or the assignment) and goes on with the next line
        assigned = _ASSIGNMENT.match(re.sub(r"^\s*(?:export|declare|local|readonly)\s+", "", body.strip()))
        name = assigned.group(1) if assigned else None
        script.bad.append((line_no, bad, name))
        if name is not None and name not in script.variables:
            script.variables[name] = ""  # the assignment fails: the variable stays unset, and `$name` expands to nothing
        return
    expanded = expand(body, script.variables)
    try:
        words = _words(expanded)
    except ValueError:  # a quote never closed: bash refuses the script ("unexpected EOF while looking for matching")
        for quote in ("'", '"'):  # read as if it closed where the text ends, and said so (a paste cut before its quote)
            try:
                words = _words(expanded.rstrip() + quote)
            except ValueError:
                continue
            flag = next((w for w in reversed(words[:-1]) if w.startswith("-")), words[0] if words else "")
            script.unclosed.append((line_no, quote, flag))
            break
        else:
            script.stray.append((line_no, [body.strip()]))
            return
    command: list[str] = []
    for word in [*words, ";"]:
        if word in (";", "&", "&&", "||", "|", ";;", "|&"):
            if command:
                _simple_command(command, line_no, script, {})
            command = []
        else:
            command.append(word)


def _words(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    # comments are gone already (_logical_lines, bash's rule: `#` opens one only at a word's start); shlex would
    # also cut at a `#` inside a word (ms-swift's `--dataset AI-MO/NuminaMath-TIR#5000`: the rest of the command lost)
    lexer.commenters = ""
    return list(lexer)


def _simple_command(words: list[str], line_no: int, script: Script, srun: dict[str, str]) -> None:
    while words and words[0] in _WRAPPERS | {"if", "elif", "while", "until"}:
        words = words[1:]
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, value = _ASSIGNMENT.match(words[0]).groups()
        # bash expands each assignment after the ones before it take effect: `n=2 NPROC_PER_NODE=$n swift sft` gives 2
        env[name] = expand(value, env) if "$" in value and env else value
        words = words[1:]
    if not words:
        script.variables.update(env)
        return
    if words[0] in _DECLARE:
        for word in words[1:]:
            match = _ASSIGNMENT.match(word)
            if match:
                script.variables[match.group(1)] = match.group(2)
            if words[0] == "export" and _NAME.fullmatch((match.group(1) if match else word)):
                script.exported.add(match.group(1) if match else word)
        return
    if words[0].startswith("--"):
        script.stray.append((line_no, words))
        return
    if words[0] == "cd" and not env:  # later commands run there (relative paths, the program, the pins beside it)
        target = words[1] if len(words) == 2 else None
        if target is None or UNRESOLVED.search(target) or target.startswith("~"):
            script.cwd = None
        else:
            script.cwd = posixpath.normpath(posixpath.join(script.cwd or "", target)) if not target.startswith("/") else posixpath.normpath(target)
        return
    if words[0] in ("source", ".") and len(words) >= 2 and not env:
        _source(words[1], script)
        return
    if words[0] == "env":
        words = words[1:]
        while words and _ASSIGNMENT.match(words[0]):
            name, value = _ASSIGNMENT.match(words[0]).groups()
            env[name] = value
            words = words[1:]
    if words[:3] == ["ray", "job", "submit"] and "--" in words:
        # `ray job submit [OPTIONS] -- ENTRYPOINT...` (Ray's job CLI; OpenRLHF's Ray examples): the entrypoint is the launch
        words = words[words.index("--") + 1 :]
    if words and words[0] == "srun":
        options, words = _srun_options(words[1:])
        srun = {**srun, **options, "srun": ""}  # the key "srun": Slurm starts the tasks, whatever options it was given
    if words and words[0] == "ssh":  # `ssh [options] host "command"`: the remote command is a script of its own
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 2 if len(words[i]) == 2 and words[i][1] in _SSH_WITH_VALUE else 1
        if i + 1 < len(words):
            words = ["bash", "-c", " ".join(words[i + 1 :])]
    if words and words[0] == "eval" and not env:  # `cmd="torchrun ..."; eval $cmd`: bash joins the words and runs
        if len(words) > 1:  # them as a command line of their own (quotes in the value now count)
            _run_line(" ".join(words[1:]), line_no, script)
        return
    if len(words) >= 3 and words[0] in ("bash", "sh") and words[1] == "-c":
        seen = {k: v for k, v in script.variables.items() if k in script.exported}
        inner = parse(words[2], {**seen, **env, **({SCRIPT_DIR: script.variables[SCRIPT_DIR]} if SCRIPT_DIR in script.variables else {})}, line_no)
        for command in inner.commands:
            command.srun = {**srun, **command.srun}
        script.commands += inner.commands
        script.stray += inner.stray
        script.unclosed += inner.unclosed
        return
    if words:
        exported = {k: v for k, v in script.variables.items() if k in script.exported}
        script.commands.append(Command(words, line_no, {**exported, **env}, srun, script.cwd))


_SOURCED = "__vramfit_sourced__"  # how deep `source` has gone (a file sourcing itself stops at 3)


def _source(target: str, script: Script) -> None:
    """`source FILE` / `. FILE`: bash runs FILE in this shell, so the variables it sets and exports are the script's
    from here on (`source env.sh` holding MODEL=... before `torchrun ... $MODEL`). FILE is read where it lies (from
    the folder a `cd` above chose, else beside the script, else here); its commands are not this script's launches."""
    depth = int(script.variables.get(_SOURCED, "0"))
    if depth >= 3 or UNRESOLVED.search(target) or target.startswith("~"):
        return
    here = script.variables.get(SCRIPT_DIR)
    folders = [*([posixpath.join(here, script.cwd or "")] if here else []), *([here] if here else []), os.getcwd()]
    path = target if target.startswith("/") else next((posixpath.join(f, target) for f in folders if os.path.isfile(posixpath.join(f, target))), None)
    if path is None or not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(1_000_000)
    except (OSError, UnicodeDecodeError):
        return
    inner = parse(text, {**script.variables, _SOURCED: str(depth + 1)}, script_dir=posixpath.dirname(os.path.abspath(path)))
    for name, value in inner.variables.items():
        if name not in (SCRIPT_DIR, _SOURCED):
            script.variables[name] = value
    script.exported |= inner.exported - {SCRIPT_DIR, _SOURCED}


def _srun_options(words: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            if not eq and key in _SRUN_LONG and i + 1 < len(words):
                value, i = words[i + 1], i + 1
            options[key] = value
        elif len(word) >= 2 and word[1] in _SRUN_SHORT:
            value = word[2:]
            if not value and i + 1 < len(words):
                value, i = words[i + 1], i + 1
            options[_SRUN_SHORT_NAMES.get(word[1], word[1])] = value
        i += 1
    gres = re.search(r"gpu(?::[\w-]+)?:(\d+)", options.get("gres", ""))
    if gres:
        options.setdefault("gpus-per-node", gres.group(1))
    return options, words[i:]


def expand(text: str, variables: dict[str, str]) -> str:
    """`text` with the variables the script defines substituted; single-quoted parts untouched."""
    out: list[str] = []
    quote = None
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        word_start = i == 0 or text[i - 1] in " \t"
        if quote == "'":
            out.append(c)
            quote = None if c == "'" else quote
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            out += [c, text[i + 1]]
            i += 2
            continue
        if c == '"':
            quote = None if quote == '"' else '"'
        elif c == "'" and quote is None:
            quote = "'"
        elif c == "$" and i + 1 < n:
            value, i = _dollar(text, i, variables)
            out.append(_insert(value, quote == '"'))
            continue
        elif c == "`" and quote in (None, '"'):
            end = text.find("`", i + 1)
            out.append("$(...)")
            i = n if end < 0 else end + 1
            continue
        elif quote is None and word_start and _REDIRECT.match(text, i):
            i = _skip_redirect(text, i)
            continue
        out.append(c)
        i += 1
    return "".join(out)


# What may follow the name in `${name...}` (bash's parameter expansion): nothing, `[subscript]`, or an operator
# (`:-` `-` `:=` `=` `:?` `?` `:+` `+` `#` `##` `%` `%%` `/` `//` `^` `^^` `,` `,,` `:offset` `@op`).
_PARAMETER = re.compile(r"^(?:[#!])?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:\[[^\]]*\])?(?P<rest>.*)$", re.S)


def bad_substitution(text: str) -> str | None:
    """The first `${...}` in `text` (outside single quotes) that bash refuses with "bad substitution", e.g.
    `${batch_size*2}` written for `$((batch_size*2))`; None when all are valid."""
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = None if c == "'" else quote
        elif c == "\\":
            i += 1
        elif c == "'" and quote is None:
            quote = "'"
        elif c == '"':
            quote = None if quote == '"' else '"'
        elif text.startswith("${", i):
            end = _matching(text, i + 1, "{", "}")
            inner = text[i + 2 : end]
            match = _PARAMETER.match(inner)
            rest = match.group("rest") if match else None
            if inner in ("#", "!") or (inner.startswith("!") and rest in ("*", "@")):
                pass
            elif match is None or (rest and rest[0] not in ":-=?+#%/^,@"):
                return text[i : end + 1]
            i = end
        i += 1
    return None


def _skip_redirect(text: str, i: int) -> int:
    """Past `> file`, `2>&1`, `&> file`, `>> file`, `< file`."""
    match = _REDIRECT.match(text, i)
    i = match.end()
    if match.group(3):
        return i
    while i < len(text) and text[i] in " \t":
        i += 1
    quote = None
    while i < len(text) and (quote or text[i] not in " \t;&|"):
        if text[i] in "'\"":
            quote = None if quote == text[i] else (quote or text[i])
        i += 1
    return i


def _insert(value: str, in_double_quotes: bool) -> str:
    if in_double_quotes:
        return value.replace("\\", "\\\\").replace('"', '\\"')
    return " ".join(shlex.quote(word) for word in value.split())


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """Index of the `close` that balances the `open_` at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def _dollar(text: str, i: int, variables: dict[str, str]) -> tuple[str, int]:
    """The value of the `$...` at text[i], and the index after it."""
    nxt = text[i + 1]
    if text.startswith("$((", i):
        end = _matching(text, i + 1, "(", ")")
        inner = text[i + 3 : end - 1]
        return _arithmetic(expand(inner, variables), variables), end + 1
    if nxt == "[":  # `$[expression]`: bash's older spelling of `$((expression))` (still expanded by bash 5)
        end = _matching(text, i + 1, "[", "]")
        return _arithmetic(expand(text[i + 2 : end], variables), variables), end + 1
    if nxt == "(":
        end = _matching(text, i + 1, "(", ")")
        found = _SCRIPT_DIR.match(text[i + 2 : end])
        if found and SCRIPT_DIR in variables:  # the script's own folder (or one relative to it)
            return posixpath.normpath(variables[SCRIPT_DIR] + (found.group(1) or found.group(2) or "")), end + 1
        return "$(...)", end + 1
    if nxt == "{":
        end = _matching(text, i + 1, "{", "}")
        return _braced(text[i + 2 : end], variables), end + 1
    match = _NAME.match(text, i + 1)
    if match:
        name = match.group(0)
        return variables.get(name, "$" + name), match.end()
    if nxt in "0123456789" and nxt in variables:  # a positional parameter the caller gave (a called script's arguments)
        return variables[nxt], i + 2
    if nxt in "0123456789@*#?!$-":
        return "$" + nxt, i + 2
    return "$", i + 1


def _braced(inner: str, variables: dict[str, str]) -> str:
    match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(:?[-=+?])?(.*)$", inner, re.S)
    if not match:
        return "${" + inner + "}"
    name, op, word = match.groups()
    value = variables.get(name)
    if op is None:
        return "${" + name + "}" if value is None else value
    unset = value is None or (op.startswith(":") and value == "")
    if op.endswith(("-", "=")):
        if not unset:
            return value
        default = _word(word, variables)
        if op.endswith("="):
            variables[name] = default
        return default
    if op.endswith("+"):
        return "" if unset else _word(word, variables)
    return "${" + inner + "}" if unset else value


def _word(word: str, variables: dict[str, str]) -> str:
    """The `word` of `${VAR:-word}`: expanded, quotes removed."""
    text = expand(word, variables)
    try:
        return " ".join(shlex.split(text))
    except ValueError:
        return text


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.FloorDiv: operator.floordiv}


def _arithmetic(expression: str, variables: dict[str, str]) -> str:
    """`$(( ))` on integers, as bash does (`/` truncates); unresolved if anything is unknown."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return int(variables[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = value(node.left), value(node.right)
            return int(left / right)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(node)

    try:
        return str(value(ast.parse(expression.strip(), mode="eval").body))
    except (SyntaxError, ValueError, KeyError, ZeroDivisionError, TypeError):
        return "$((...))"
