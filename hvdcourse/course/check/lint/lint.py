"""``hvdcourse-lint``: check a training script for the distributed mistakes the course teaches
(lessons: Converting a Keras MNIST script to Horovod; PyTorch with Horovod, and DDP).

``hvdcourse-lint SCRIPT...`` (or ``python -m hvdcourse.course.check.lint``) reads each script,
Horovod with TensorFlow/Keras or PyTorch, or PyTorch DDP, without running it, and prints one line
per mistake, ``file:line: rule: what is wrong; fix: ... (lesson ...)``, and nothing for a clean
script. Where it cannot tell, it says so once per rule (``cannot tell: ...``), never as a mistake.
A comment ``# hvdlint: ignore[rule]`` (or ``ignore[rule1,rule2]``, or plain ``ignore``) on the
reported line silences it. A single-worker script gets what its conversion still needs.

``--run`` also starts each script on 2 ranks for a few steps
(:mod:`hvdcourse.course.check.lint.run`) and checks what only a run shows.

Exit status: 0 nothing found (notes only), 1 mistakes found, 2 a script could not be read or run.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize

from hvdcourse.course.check.lint import checks_data, checks_ranks, checks_setup, signatures
from hvdcourse.course.check.lint.facts import Facts
from hvdcourse.course.check.lint.rules import RULES, Report
from hvdcourse.course.check.lint.source import Script
from hvdcourse.course.check.lint.undefined import dynamic_names, undefined_names
from hvdcourse.runtime.errors import UsageError, run_cli

IGNORE = re.compile(r"hvdlint:\s*ignore(?:\[([^\]]*)\])?")
CHECKS = (
    checks_setup.check_init,
    checks_setup.check_optimizer,
    checks_setup.check_broadcast,
    checks_setup.check_learning_rate,
    checks_data.check_sharding,
    checks_data.check_sampler,
    checks_data.check_steps,
    checks_ranks.check_writes,
    checks_ranks.check_metrics,
    checks_ranks.check_device,
    checks_ranks.check_collectives,
    signatures.check_arguments,
)


class Unreadable(UsageError):
    """The script cannot be read or parsed (exit code 2)."""


def ignored(text: str) -> dict:
    """``{line: set of rules, or None for all}`` from the ``# hvdlint: ignore[...]`` comments."""
    found = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = IGNORE.search(token.string)
            if match:
                rules = match.group(1)
                found[token.start[0]] = (
                    None if rules is None else {r.strip() for r in rules.split(",") if r.strip()}
                )
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def lint_source(text: str, path: str = "<script>", predefined=()) -> list:
    """The findings and notes of one script's source, in line order (``predefined``: names that
    exist before it runs, as a notebook's earlier cells define them)."""
    try:
        script = Script(text, path)
    except SyntaxError as err:
        raise Unreadable(
            f"{path}:{err.lineno or 1}: cannot read it: {err.msg} (fix the syntax, then run "
            "hvdcourse-lint again)"
        ) from None
    facts = Facts(script)
    report = Report(path, facts.flavour)
    for name, node in undefined_names(script.tree, predefined):
        report.finding(
            "undefined-name", node, f"{name!r} is used here but nothing defines it before this line"
        )
    why = dynamic_names(script.tree)
    if why:
        report.note("undefined-name", 1, f"{why}: names it defines cannot be checked")
    if facts.other:
        report.note(
            "framework",
            1,
            f"the script trains with {facts.other}, which hvdcourse-lint does not check "
            "(it checks Horovod with TensorFlow/Keras or PyTorch, and PyTorch DDP)",
        )
    elif facts.flavour is None:
        report.note(
            "framework",
            1,
            "no TensorFlow, Keras or PyTorch import: this does not look like a training script",
        )
    else:
        for check in CHECKS:
            check(facts, report)
    rules_of = ignored(text)
    kept = [
        item
        for item in report.items
        if not (
            item.line in rules_of
            and (rules_of[item.line] is None or item.rule in rules_of[item.line])
        )
    ]
    unique, seen = [], set()
    for item in kept:
        key = (item.line, item.rule, item.what)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return sorted(unique, key=lambda i: (i.line, i.note, i.rule))


def lint_file(path: str) -> list:
    """:func:`lint_source` of the file at ``path`` (the path as given names it in the findings)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise Unreadable(f"{path}: cannot read it ({err})") from None
    return lint_source(text, path)


def exit_status(items: list, unreadable: bool = False) -> int:
    if any(not item.note for item in items):
        return 1
    return 2 if unreadable else 0


def rules_table() -> str:
    """One line per rule: its name and what it finds."""
    width = max(len(name) for name in RULES)
    return "\n".join(
        f"{name:<{width}}  {rule.summary}" for name, rule in RULES.items() if name != "framework"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hvdcourse-lint",
        description="Check Horovod (TensorFlow/Keras, PyTorch) and PyTorch DDP training scripts "
        "for the distributed mistakes the course teaches. One line per mistake: "
        "file:line: rule: what is wrong; fix (lesson). Silence a line with "
        "'# hvdlint: ignore[rule]'. Exit status: 0 clean, 1 mistakes found, 2 a script could not "
        "be read or run.",
    )
    p.add_argument("scripts", nargs="*", metavar="SCRIPT", help="the training scripts to check")
    p.add_argument(
        "--run",
        action="store_true",
        help="also start each script on 2 ranks for a few steps and check identical weights, "
        "rank-0-only files and different data per rank (arguments for the script after --)",
    )
    p.add_argument("--np", type=int, default=2, help="ranks for --run (default 2)")
    p.add_argument("--steps", type=int, default=2, help="training steps for --run (default 2)")
    p.add_argument(
        "--timeout", type=float, default=180, help="seconds a --run may last (default 180)"
    )
    p.add_argument(
        "--launcher",
        choices=("mpirun", "gloo", "mpi", "torchrun"),
        help="launcher for --run (default: torchrun for DDP; mpirun for Horovod where MPI is "
        "installed, else horovodrun --gloo)",
    )
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, script_args = argv[:at], argv[at + 1 :]
    args = parser().parse_args(argv)
    if args.list_rules:
        print(rules_table())
        return 0
    if not args.scripts:
        parser().error("give the training script(s) to check, e.g. hvdcourse-lint train.py")
    if args.np < 2 or args.steps < 1:
        raise UsageError("--np must be 2 or more and --steps 1 or more")
    items, unreadable = [], False
    for path in args.scripts:
        try:
            found = lint_file(path)
        except Unreadable as err:
            print(str(err), flush=True)
            unreadable = True
            continue
        if args.run:
            from hvdcourse.course.check.lint.run import run_script

            outcome = run_script(
                path,
                script_args,
                np=args.np,
                steps=args.steps,
                timeout=args.timeout,
                launcher=args.launcher,
            )
            found = sorted(found + outcome.findings, key=lambda i: (i.line, i.note, i.rule))
            if outcome.problem:
                unreadable = True
        for item in found:
            print(item.format(), flush=True)
        if args.run and outcome.problem:
            print(outcome.problem, flush=True)
        items += found
    return exit_status(items, unreadable)


def cli() -> int:
    """The console script ``hvdcourse-lint``."""
    return run_cli(main, stop_on_sigterm=True)
