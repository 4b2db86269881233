"""The `vramfit` command. Exit codes (vramfit/problems.py): 0 ok / fits, 1 does not fit or the run
failed, 2 bad input, 3 incomplete, 70 internal error (one line and a bug-report hint, never a traceback).

Heavy libraries (torch, transformers, deepspeed) are imported inside the commands that need
them, so `vramfit --help` and `vramfit list` answer at once.
"""

from __future__ import annotations

import argparse
import os
import sys

from vramfit import problems
from vramfit.problems import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INCOMPLETE, EXIT_INTERNAL, EXIT_OK, ConfigError

BUG_REPORT = "https://github.com/vramfit/vramfit/issues"
# What exit code 1 (and 3) means per command; 0, 2 and 70 mean the same everywhere.
EXIT_ONE = {
    "list": None,
    "show": None,
    "cp": None,
    "validate": None,
    "plan": "does not fit (GPU memory or host RAM); the verdict is printed either way",
    "run": "the run failed (the doctor's diagnosis follows), or a node did not join in time",
    "slurm": None,
    "review": "an error found would fail or OOM the run (the findings are printed)",
    "doctor": None,  # a diagnosis is an answer: 0 whatever the log shows
    "fit": "does not fit",
}


def exit_codes(command: str | None = None) -> str:
    """The exit-code block of every --help (and the README's table says the same)."""
    one = EXIT_ONE.get(command, "does not fit, or the run failed") if command else "does not fit, or the run failed"
    lines = ["exit codes:", f"  {EXIT_OK:<3} ok" + (" / fits" if command in (None, "plan", "review", "fit") else "")]
    if one:
        lines.append(f"  {EXIT_FAILED:<3} {one}")
    lines.append(f"  {EXIT_BAD_INPUT:<3} bad input: every problem is listed, nothing was launched or written")
    if command in (None, "review"):
        lines.append(f"  {EXIT_INCOMPLETE:<3} incomplete: an answer was given, but part of it could not be computed")
    lines.append(f"  {EXIT_INTERNAL:<3} internal error: a bug in vramfit (one line; VRAMFIT_DEBUG=1 or -v shows the traceback)")
    return "\n".join(lines) + "\n"


EPILOG = """\
examples:
  vramfit list
  vramfit show vlm-r1-h20
  vramfit validate vlm-r1-h20 per_device_train_batch_size=2 gradient_accumulation_steps=8
  vramfit plan vlm-r1-h20 --json
  vramfit run vlm-r1-h20 --dry-run
  vramfit run vlm-r1-h20 --smoke
  vramfit doctor runs/vlm-r1-h20/train.log --recipe vlm-r1-h20
  vramfit review run_grpo_rec.sh --gpu h20
  vramfit slurm sharegpt4v-7b-16xa100-80g > job.sbatch
  vramfit -v plan vlm-r1-h20    (-v / VRAMFIT_DEBUG=1: the traceback of an internal error)

overrides are key=value: a dotted path into the recipe (hardware.gpus_per_node=4,
data.max_pixels=1003520) or a bare Hugging Face / TRL argument name, which resolves to
training.<name> (per_device_train_batch_size=2). They are validated like the file.
"""


def _bounded_int(low: int, high: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number ({what}, {low}..{high})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({what}: {low}..{high})")
        return value

    parse.__name__ = what
    return parse


PORT = _bounded_int(1, 65535, "a TCP port")
SECONDS = _bounded_int(1, 7 * 24 * 3600, "seconds")
NODE_RANK = _bounded_int(0, 1023, "a node rank")
NODES = _bounded_int(1, 1024, "nodes")


def split_targets(items: list[str]) -> tuple[list[str], list[str]]:
    targets = [i for i in items if "=" not in i]
    overrides = [i for i in items if "=" in i]
    return targets, overrides


def report(error: ConfigError, as_json: bool = False) -> int:
    return problems.report(error, as_json=as_json)


def cmd_list(args) -> int:
    from vramfit import recipe_index

    if args.markdown:
        print(recipe_index.markdown_table())
    else:
        recipe_index.print_table()
    return EXIT_OK


def cmd_show(args) -> int:
    from vramfit import recipe_index

    targets, overrides = split_targets(args.items)
    if len(targets) != 1:
        return _usage("show", targets)
    return recipe_index.show(targets[0], overrides, as_json=args.json)


def cmd_validate(args) -> int:
    from vramfit.paths import all_recipe_files
    from vramfit.validate import validate

    targets, overrides = split_targets(args.items)
    targets = targets or [str(p.parent) for p in all_recipe_files()]
    failures, verdicts = [], []
    for target in targets:
        try:
            result = validate(target, overrides, plan=not args.no_plan, force=args.force, cache=True)
        except ConfigError as error:
            failures.append(error)
            verdicts.append({"target": target, "ok": False, "problems": problems.as_dicts(error.problems)})
            if not args.json:
                print(f"FAIL {target}", file=sys.stderr)
                report(error)
            continue
        r = result.recipe
        verdict = {"target": target, "recipe": r.name, "ok": True, "problems": problems.as_dicts(result.warnings)}
        fit = ""
        if result.plan is not None:
            verdict["plan"] = {
                "per_gpu_peak_gib": round(result.plan.per_gpu_peak_gib, 2),
                "gpu_memory_gib": result.plan.gpu_memory_gib,
                "host_ram_gib": round(result.plan.host_ram_gib, 1),
                "fits": bool(result.plan.fits),
            }
            fit = f"; predicted {result.plan.per_gpu_peak_gib:.1f} of {result.plan.gpu_memory_gib:.1f} GiB per GPU, host {result.plan.host_ram_gib:.0f} of {r.hardware.host_ram_gib:.0f} GiB"
        verdicts.append(verdict)
        if not args.json:
            print(f"ok   {r.name}: {r.method} on {r.hardware.nodes} x {r.hardware.gpus_per_node} x {r.hardware.gpu}{fit}")
            for w in result.warnings:
                print(f"  warning: {w}")
    code = EXIT_BAD_INPUT if failures else EXIT_OK
    if args.json:
        import json

        print(json.dumps({"exit_code": code, "recipes": verdicts}, indent=2))
    return code


def cmd_run(args) -> int:
    from vramfit.run import run

    targets, overrides = split_targets(args.items)
    if len(targets) != 1:
        return _usage("run", targets)
    return run(
        targets[0],
        overrides,
        dry_run=args.dry_run,
        smoke=args.smoke,
        run_dir=args.run_dir,
        force=args.force,
        nodes=args.nodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        hostfile=args.hostfile,
        no_ssh=args.no_ssh,
        join_timeout_s=args.join_timeout,
        resume=args.resume,
        overwrite=args.overwrite,
    )


def cmd_slurm(args) -> int:
    from vramfit.slurm import render

    targets, overrides = split_targets(args.items)
    if len(targets) != 1:
        return _usage("slurm", targets)
    print(render(targets[0], overrides, time=args.time, partition=args.partition, account=args.account, master_port=args.master_port, force=args.force), end="")
    return EXIT_OK


def cmd_cp(args) -> int:
    from vramfit import recipe_index

    dest = recipe_index.copy(args.recipe, args.new_name)
    print(f"copied to {dest}/; edit {dest}/recipe.yaml, then: vramfit validate {args.new_name}")
    return EXIT_OK


def _usage(command: str, targets: list[str]) -> int:
    """A command that takes one RECIPE got another count: the one problem format (main reports it, --json too)."""
    raise ConfigError(
        [
            problems.Problem(
                f"vramfit {command}",
                "RECIPE",
                f"{command} takes one RECIPE, got {len(targets)} ({', '.join(targets) or 'none'})",
                "name one recipe (vramfit list) and write overrides as key=value.",
            )
        ]
    )


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors (unknown option, missing argument, bad value) in the one problem format."""

    def error(self, message: str):
        raise ConfigError([problems.Problem(self.prog, "arguments", message, f"see `{self.prog} --help`.")])


def _command_word(argv: list[str]) -> str | None:
    """The subcommand a command line names (the first word that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(full: bool = True, command: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with full=False, the arguments of plan/fit/review/doctor only for `command`
    (their modules import the planner, the reviewer and the doctor: `vramfit --help` and `list` need none)."""
    parser = _Parser(
        prog="vramfit",
        description="Check a training recipe fits before it launches, then launch it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="the recipes in the tree")
    p.add_argument("--markdown", action="store_true", help="print the README's recipe table")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="a recipe as it will run (overrides applied), its derived numbers and batch equation (exit 2 when it breaks)")
    p.add_argument("items", nargs="+", metavar="RECIPE|key=value")
    p.add_argument("--json", action="store_true", help="print the resolved recipe, derived numbers and problems as JSON")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("validate", help="every check, all problems at once (exit 2 on any)")
    p.add_argument("items", nargs="*", metavar="RECIPE|PATH|key=value", help="default: every recipe in the tree")
    p.add_argument("--force", action="store_true", help="do not refuse a recipe predicted not to fit")
    p.add_argument("--no-plan", action="store_true", help="skip the memory planner")
    p.add_argument("--json", action="store_true", help="one JSON object: each recipe's verdict, problems and predicted memory")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("plan", help="predict per-GPU peak and host RAM, and the smallest fixes", formatter_class=argparse.RawDescriptionHelpFormatter)
    if full or command == "plan":  # the planner's imports only when its arguments are parsed
        from vramfit.planner import cli as planner_cli

        planner_cli.add_arguments(p)
        p.set_defaults(func=planner_cli.run)

    p = sub.add_parser("run", help="validate, then launch (or --dry-run, or --smoke)")
    p.add_argument("items", nargs="+", metavar="RECIPE|key=value")
    p.add_argument("--dry-run", action="store_true", help="print and save the command, environment and resolved DeepSpeed JSON")
    p.add_argument("--smoke", action="store_true", help="the tiny variant: same entrypoint, launcher and JSON, 2 ranks")
    p.add_argument("--run-dir", help="where the run's files go (default runs/<recipe>)")
    p.add_argument("--force", action="store_true", help="launch even if predicted not to fit (or short of host RAM)")
    p.add_argument("--resume", action="store_true", help="continue from the last complete checkpoint in the output directory")
    p.add_argument("--overwrite", action="store_true", help="start fresh; an existing output directory is moved aside, never deleted")
    node = p.add_argument_group("several nodes (see also `vramfit slurm`)")
    node.add_argument("--node-rank", type=NODE_RANK, help="this node's rank (torchrun, accelerate, deepspeed --no-ssh); Slurm: SLURM_NODEID")
    node.add_argument("--master-addr", help="address of node 0, reachable from every node")
    node.add_argument("--master-port", type=PORT, help="rendezvous port on node 0 (default 29500 for several nodes)")
    node.add_argument("--hostfile", help="DeepSpeed launcher hostfile (`host slots=N` lines); run on the first node only")
    node.add_argument("--no-ssh", action="store_true", help="DeepSpeed launcher per-node mode: run on every node with --node-rank")
    node.add_argument("--join-timeout", type=SECONDS, default=600, metavar="SECONDS", help="fail if a node has not joined by then (default 600)")
    node.add_argument("--nodes", type=NODES, help="with --smoke: emulate this many nodes on this machine (1 or 2)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("slurm", help="print an sbatch script for the recipe (vramfit slurm RECIPE > job.sbatch)")
    p.add_argument("items", nargs="+", metavar="RECIPE|key=value")
    p.add_argument("--time", default="24:00:00", help="Slurm time limit (default 24:00:00)")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--master-port", type=PORT, default=29500)
    p.add_argument("--force", action="store_true", help="render even if predicted not to fit")
    p.set_defaults(func=cmd_slurm)

    p = sub.add_parser("fit", help="the fastest configuration that fits, ranked; --write it as a recipe", formatter_class=argparse.RawDescriptionHelpFormatter)
    if full or command == "fit":
        from vramfit.fit import cli as fit_cli

        fit_cli.add_arguments(p)
        p.set_defaults(func=fit_cli.run)

    p = sub.add_parser("review", help="review an upstream launch script and its configs: checks, memory, closest recipe")
    if full or command == "review":
        from vramfit.review import cli as review_cli

        review_cli.add_arguments(p)
        p.set_defaults(func=review_cli.run)

    p = sub.add_parser("cp", help="copy a recipe to a new folder to edit (atomic: all of it or nothing)")
    p.add_argument("recipe")
    p.add_argument("new_name")
    p.set_defaults(func=cmd_cp)

    p = sub.add_parser("doctor", help="read a crash log: what ran out, where, and the fix")
    if full or command == "doctor":
        from vramfit.doctor import cli as doctor_cli

        doctor_cli.add_arguments(p)
        p.set_defaults(func=_doctor)
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show every library warning, log line and progress bar (here and in every training rank), "
        "and the traceback of an internal error (also VRAMFIT_DEBUG=1)",
    )
    parser.epilog = (parser.epilog or "") + "\n" + exit_codes()
    for name, command in sub.choices.items():
        if command.formatter_class is argparse.HelpFormatter:
            command.formatter_class = argparse.RawDescriptionHelpFormatter
        command.epilog = ((command.epilog or "").rstrip("\n") + "\n\n" if command.epilog else "") + exit_codes(name)
    return parser


def _doctor(args) -> int:
    from vramfit.doctor import cli as doctor_cli
    from vramfit.planner.cli import plan_fixes

    if args.recipe:  # validated exactly as `vramfit validate` does, before the log is read (exit 2 on any problem)
        from vramfit.validate import validate

        validate(args.recipe, plan=False, cache=True)  # its resolved values, cached, then price the fixes (plan_fixes)
    return doctor_cli.run(args, plan_fixes=plan_fixes if args.recipe else None)


def main(argv: list[str] | None = None) -> int:
    """Every command's entry: exit codes 0/1/2/3/70, never a traceback (unless -v or VRAMFIT_DEBUG=1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = os.environ.get("VRAMFIT_DEBUG", "") not in ("", "0")
    if argv and argv[0] in ("-v", "--verbose"):
        verbose, argv = True, argv[1:]
    import logging

    # A library's log handler bound to a stream that has since closed would print "--- Logging error ---"
    # with a traceback; logging's documented production setting drops such a record instead.
    logging.raiseExceptions = verbose
    with _SafeStreams():
        try:
            return _main(argv, verbose)
        except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
            code = exc.code
            return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_BAD_INPUT)
        except ConfigError as error:
            return report(error, as_json="--json" in argv)
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            _quiet_stdout()
            return EXIT_OK
        except MemoryError:
            _say(
                "vramfit: internal error: ran out of memory. This is a bug in vramfit (inputs are bounded); "
                f"please report it with the command you ran: {BUG_REPORT}"
            )
            return EXIT_INTERNAL
        except Exception as exc:  # noqa: BLE001 - the one place every unexpected error ends
            if verbose:
                import traceback

                traceback.print_exc(file=sys.stderr)
            where = _where(exc)
            _say(
                f"vramfit: internal error: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                f"{where}. This is a bug in vramfit, not in your input; "
                + ("please report it with this traceback" if verbose else "run again with -v (or VRAMFIT_DEBUG=1) for the traceback and report it")
                + f" at {BUG_REPORT}"
            )
            return EXIT_INTERNAL


def _main(argv: list[str], verbose: bool = False) -> int:
    parser = build_parser(full=False, command=_command_word(argv))
    args, extra = parser.parse_known_args(argv)
    # Overrides may follow options (`launch.sh --dry-run key=value`): take them as items too.
    stray = [e for e in extra if "=" not in e or e.startswith("-")]
    if stray or (extra and not hasattr(args, "items")):
        prog = f"vramfit {args.command}"
        raise ConfigError([problems.Problem(prog, "arguments", f"unrecognized arguments: {' '.join(stray or extra)}", f"see `{prog} --help`.")])
    if extra:
        args.items = [*args.items, *extra]
    from vramfit import libraries

    libraries.set_verbose(verbose or args.verbose)
    libraries.quiet()  # imports nothing; the libraries are quieted as they are imported
    return args.func(args)


def _where(exc: BaseException) -> str:
    """` (in file.py:line)` of the innermost vramfit frame, so a one-line report still points somewhere."""
    tb = exc.__traceback__
    last = ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "vramfit" in name:
            last = f" (in {os.path.basename(name)}:{tb.tb_lineno})"
        tb = tb.tb_next
    return last


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _quiet_stdout() -> None:
    """The reader went away (`| head -1`): send the rest to /dev/null so the exit flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


class _PipeSafe:
    """A text stream whose reader may go away: after a BrokenPipeError (or a closed stream) writes are dropped.

    The command goes on and returns its own exit code; Python's exit-time flush finds /dev/null,
    so no "Exception ignored ... BrokenPipeError" is printed either.
    """

    def __init__(self, stream, fd: int):
        self._stream, self._fd, self._broken = stream, fd, False

    def _break(self) -> None:
        self._broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._fd)
            os.close(devnull)
        except OSError:
            pass

    def write(self, text):
        if self._broken:
            return len(text)
        try:
            return self._stream.write(text)
        except (BrokenPipeError, ValueError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError) and exc.errno not in (9, 32):
                raise
            self._break()
            return len(text)

    def flush(self):
        if self._broken:
            return
        try:
            self._stream.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError) and exc.errno not in (9, 32):
                raise
            self._break()

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _SafeStreams:
    """Install _PipeSafe over sys.stdout / sys.stderr for the duration of a command."""

    def __enter__(self):
        self._saved = (sys.stdout, sys.stderr)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            if stream is None:
                setattr(sys, name, open(os.devnull, "w"))
            elif not isinstance(stream, _PipeSafe):
                try:
                    real_fd = stream.fileno()
                except (OSError, ValueError, AttributeError):
                    real_fd = -1  # a captured stream (pytest, io.StringIO): nothing to redirect
                setattr(sys, name, _PipeSafe(stream, real_fd if real_fd >= 0 else fd) if real_fd >= 0 else stream)
        return self

    def __exit__(self, *exc):
        for name, stream in zip(("stdout", "stderr"), self._saved):
            current = getattr(sys, name)
            if isinstance(current, _PipeSafe):
                try:
                    current.flush()
                except Exception:  # noqa: BLE001
                    pass
            setattr(sys, name, stream)
        return False


if __name__ == "__main__":
    sys.exit(main())
