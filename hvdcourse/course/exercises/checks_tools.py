"""Checks of exercises 8-11: timeline analysis, choosing a setup from a scaling curve, a Slurm job
script, and finding the bugs of a Horovod script.

Lessons: Profiling with the Horovod timeline; Measuring performance; Multi-node training with Slurm;
Converting a Keras MNIST script to Horovod.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter

import numpy as np

from hvdcourse.course.exercises import paths
from hvdcourse.course.exercises.common import Stop, attempt, call, fmt, require_function
from hvdcourse.course.exercises.result import check

TIMELINE_FILE = "timeline_2ranks.json"


# ------------------------------------------------------------------ exercise 8
def reference_phase_times(path: str) -> dict:
    """{phase: total ms summed over tensors}, from the course's timeline reader."""
    from hvdcourse.course.lessons import timeline

    table = timeline.phase_table(timeline.load_events(path))
    return {phase: float(ms) for phase, ms in table["total_ms"].items()}


def truncated_copy(
    path: str, folder: str, fraction: float = 0.6, out: str = "killed_run_timeline.json"
) -> str:
    """A copy of the timeline cut in the middle of a record, without its closing bracket."""
    text = open(path, encoding="utf-8").read()
    cut = int(len(text) * fraction)
    cut = text.index('"ts"', cut) + 3  # inside a record: the writer was killed mid-line
    out = os.path.join(folder, out)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text[:cut])
    return out


def _compare_phases(got, want) -> tuple:
    if not isinstance(got, dict):
        return False, False, f"expected a dict {{phase: milliseconds}}, got {type(got).__name__}"
    names_ok = set(got) == set(want)
    if not names_ok:
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        return False, False, f"missing phases {missing}, unexpected {extra}"
    off = {
        k: (float(got[k]), want[k])
        for k in want
        if not np.isclose(float(got[k]), want[k], rtol=0.01, atol=0.01)
    }
    if off:
        k, (g, w) = next(iter(off.items()))
        return (
            True,
            False,
            f"{k}: you found {g:.3f} ms, the timeline holds {w:.3f} ms ({len(off)} phase(s) off)",
        )
    return True, True, ""


@check(
    "ex08",
    "Read a Horovod timeline: time per phase",
    {
        "phases": ("finds every phase of the timeline (top-level and nested)", 1),
        "totals": ("total time per phase, summed over tensors, in ms", 2),
        "truncated": ("also reads the file of a killed run (no closing ']', last record cut)", 1),
    },
)
def ex08_timeline(c, time_per_phase, hidden=None):
    """Exercise 8: ``time_per_phase(path) -> {phase: total ms}`` on a recorded and on a truncated timeline
    (``hidden``: ``{"variant": fn(path, folder) -> path}``, the grader's own timeline made from this one,
    judged with it)."""
    path = paths.data_path(TIMELINE_FILE)
    require_function(c, time_per_phase, "time_per_phase")
    with tempfile.TemporaryDirectory(prefix="hvdcourse-ex08-") as folder:
        files = [(path, TIMELINE_FILE)]
        if hidden and hidden.get("variant"):
            files.append((hidden["variant"](path, folder), "the grader's own timeline"))
        names_ok = totals_ok = True
        detail, ratio_of = "", None
        for where, label in files:
            want = reference_phase_times(where)
            got = call(c, time_per_phase, where, name="time_per_phase", key_args=(label,))
            ok_names, ok_totals, found = _compare_phases(got, want)
            if not (ok_names and ok_totals) and not detail:
                detail = found if label == TIMELINE_FILE else f"{label}: {found}"
                ratio_of = (got, want) if ok_names else None
            names_ok, totals_ok = names_ok and ok_names, totals_ok and ok_totals
        c.judge(
            "phases",
            names_ok,
            detail,
            "phases are the 'name' of the B (begin) events; E events have no "
            "name: each closes the latest open B of the same pid, so keep a stack per pid",
        )
        hint = "duration = ts of the E minus ts of its B, in microseconds: divide by 1000; add up over all tensors"
        if names_ok and not totals_ok and ratio_of is not None:
            got, want = ratio_of
            ratio = np.median([float(got[k]) / want[k] for k in want if want[k] > 0])
            if np.isclose(ratio, 1000, rtol=0.05):
                hint = "your numbers are 1000 times too large: ts is in microseconds, report milliseconds"
        c.judge("totals", totals_ok, detail if names_ok else "", hint)
        ok, detail = True, ""
        for number, (where, label) in enumerate(files):
            name = "killed_run_timeline.json" if number == 0 else f"killed_run_{number}.json"
            cut = truncated_copy(where, folder, out=name)
            want_cut = reference_phase_times(cut)
            outcome = attempt(
                time_per_phase, cut, name="time_per_phase", key_args=("truncated " + label,)
            )
            if "value" in outcome:
                _, good, found = _compare_phases(outcome["value"], want_cut)
            else:  # the learner's reader failed on the broken file: that is the finding
                good = False
                found = f"{outcome['raised']['type']}: {outcome['raised']['message'][:160]}"
            if not good and ok:
                ok, detail = False, found if label == TIMELINE_FILE else f"{label}, cut: {found}"
        c.judge(
            "truncated",
            ok,
            detail,
            "json.load fails on a cut file: decode the records one by one "
            "(json.JSONDecoder().raw_decode) and stop at the first incomplete one; drop events "
            "that were never closed",
        )


# ------------------------------------------------------------------ exercise 9
EFFICIENCY_CASES = [
    {1: 100.0, 2: 180.0, 4: 320.0, 8: 480.0},
    {1: 50.0, 2: 100.0},
    {1: 93618.0, 2: 64102.0},
]
# (curves, min_efficiency, max_global_batch, answer, the mistake that case exposes)
CHOICE_CASES = [
    (
        {
            32: {1: 100.0, 2: 180.0, 4: 320.0, 8: 480.0},
            128: {1: 160.0, 2: 310.0, 4: 600.0, 8: 1100.0},
        },
        0.7,
        1024,
        (128, 8),
        "the fastest setup that qualifies",
    ),
    (
        {
            32: {1: 100.0, 2: 180.0, 4: 320.0, 8: 480.0},
            128: {1: 160.0, 2: 310.0, 4: 600.0, 8: 1100.0},
        },
        0.7,
        512,
        (128, 4),
        "the global batch (batch x workers) must stay within max_global_batch",
    ),
    (
        {64: {1: 200.0, 2: 380.0, 4: 560.0, 8: 700.0}},
        0.8,
        4096,
        (64, 2),
        "8 workers are fastest but only 44% efficient: the efficiency floor rules them out",
    ),
    (
        {32: {1: 93618.0, 2: 64102.0}},
        0.7,
        1024,
        (32, 1),
        "the Horovod-and-Ray benchmark measured 2 GPUs slower than 1: then one worker is the answer",
    ),
]


@check(
    "ex09",
    "Choose batch size and workers from a scaling curve",
    {
        "efficiency": (
            "scaling efficiency = images/s on N workers / (N x images/s on 1 worker)",
            1,
        ),
        "choose": (
            "picks the fastest setup within the efficiency floor and the global-batch limit",
            2,
        ),
        "limits": ("respects both limits in every case (with at least half the cases right)", 1),
    },
)
def ex09_scaling(c, scaling_efficiency, choose_setup, hidden=None):
    """Exercise 9: ``scaling_efficiency(curve)`` and ``choose_setup(curves, min_efficiency, max_global_batch)``
    (``hidden``: the grader's own ``{"curves": [...], "choices": [...]}``, judged with these)."""
    hidden = hidden or {}
    require_function(c, scaling_efficiency, "scaling_efficiency")
    for curve in EFFICIENCY_CASES + list(hidden.get("curves", ())):
        got = call(c, scaling_efficiency, dict(curve), name="scaling_efficiency")
        want = {n: curve[n] / (n * curve[1]) for n in curve}
        try:
            good = set(got) == set(want) and all(
                np.isclose(float(got[n]), want[n], rtol=1e-3) for n in want
            )
        except (TypeError, ValueError, KeyError):
            good = False
        if not good:
            try:
                speedup = isinstance(got, dict) and all(
                    np.isclose(float(got.get(n, -1)), curve[n] / curve[1]) for n in curve
                )
            except (TypeError, ValueError):
                speedup = False
            c.fail(
                "efficiency",
                f"for {curve} you said {got!r:.120}, expected "
                f"{ {n: round(v, 3) for n, v in want.items()} }",
                "that is the speedup; efficiency divides it by the number of workers"
                if speedup
                else "efficiency(N) = throughput(N) / (N * throughput(1))",
            )
            break
    else:
        c.ok("efficiency")
    require_function(c, choose_setup, "choose_setup")
    wrong, broken = [], []
    cases = CHOICE_CASES + list(hidden.get("choices", ()))
    for curves, floor, cap, answer, lesson in cases:
        got = call(
            c,
            choose_setup,
            {b: dict(v) for b, v in curves.items()},
            floor,
            cap,
            name="choose_setup",
        )
        try:
            got = (int(got[0]), int(got[1]))
        except (TypeError, ValueError, IndexError, KeyError):
            c.stop(
                f"choose_setup returned {got!r:.80}; expected a pair (batch_per_worker, workers)",
                "return e.g. (128, 4)",
            )
            raise Stop
        if got != answer:
            wrong.append((curves, floor, cap, answer, got, lesson))
            b, n = got
            eff = (
                curves.get(b, {}).get(n, 0) / (n * curves.get(b, {}).get(1, np.inf))
                if b in curves and n
                else 0
            )
            if b * n > cap or eff < floor:
                broken.append(f"({b}, {n}) has global batch {b * n} and efficiency {eff:.2f}")
    if wrong:
        curves, floor, cap, answer, got, lesson = wrong[0]
        c.fail(
            "choose",
            f"{len(wrong)} of {len(cases)} cases wrong; e.g. min_efficiency={floor}, "
            f"max_global_batch={cap}: expected {answer}, you chose {got}",
            lesson,
        )
    else:
        c.ok("choose")
    if broken:
        c.fail(
            "limits",
            "; ".join(broken[:2]),
            "filter first (efficiency >= floor and "
            "batch * workers <= max_global_batch), then take the highest images/s",
        )
    else:  # staying within the limits is easy (one worker, the smallest batch): it counts with answers
        c.judge(
            "limits",
            len(wrong) * 2 <= len(cases),
            f"every choice is within the limits, but {len(wrong)} of {len(cases)} are not the fastest "
            "setup: this point comes with at least half the cases right",
            "among the setups within both limits, take the one with the highest images/s",
        )


# ------------------------------------------------------------------ exercise 10
SLURM_CASES = [(2, 1, 30, 3), (1, 4, 90, 5)]  # nodes, tasks per node, minutes, epochs


def slurm_minutes(value: str) -> float | None:
    """Minutes of a Slurm --time value (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS); None if invalid."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", value.strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
        return int(days) * 1440 + hours * 60 + minutes + seconds / 60
    if c is not None:
        return int(a) * 60 + int(b) + int(c) / 60
    if b is not None:
        return int(a) + int(b) / 60
    return float(a)


def sbatch_options(script: str) -> tuple:
    """({option: value} from the #SBATCH lines that sbatch reads, [#SBATCH lines it ignores])."""
    aliases = {
        "-N": "--nodes",
        "-n": "--ntasks",
        "-t": "--time",
        "-J": "--job-name",
        "-c": "--cpus-per-task",
    }
    options, ignored, body_started = {}, [], False
    for line in script.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            if body_started:
                ignored.append(stripped)
                continue
            for token in re.findall(
                r"(-{1,2}[\w-]+)(?:[= ]+([^\s#]+))?", stripped[len("#SBATCH") :]
            ):
                options[aliases.get(token[0], token[0])] = token[1]
        elif stripped and not stripped.startswith("#"):
            body_started = True  # sbatch stops reading #SBATCH at the first command
    return options, ignored


def shellcheck(script: str) -> str:
    """shellcheck's first finding ('' if clean or if shellcheck is not installed)."""
    exe = shutil.which("shellcheck")
    if exe is None:
        return ""
    run = subprocess.run(
        [exe, "-s", "bash", "-f", "gcc", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=30,
    )
    findings = [line.split(":", 3)[-1].strip() for line in run.stdout.splitlines() if line.strip()]
    return findings[0] if findings else ""


@check(
    "ex10",
    "Write a Slurm job script",
    {
        "header": (
            "starts with #!/bin/bash and every #SBATCH line comes before the first command",
            1,
        ),
        "resources": ("asks for the nodes, tasks per node and time it is given", 1),
        "launch": (
            "starts the ranks with srun --mpi=pmix and python -m hvdcourse.examples.train_hvd --epochs E",
            1,
        ),
        "shellcheck": ("is clean for shellcheck (no unset variables, quoting)", 1),
    },
)
def ex10_slurm(c, job_script, hidden=None):
    """Exercise 10: ``job_script(nodes, tasks_per_node, minutes, epochs) -> str`` (a batch script;
    ``hidden``: the grader's own ``{"cases": [(nodes, tasks_per_node, minutes, epochs), ...]}``)."""
    require_function(c, job_script, "job_script")
    cases = SLURM_CASES + [tuple(case) for case in (hidden or {}).get("cases", ())]
    scripts = {case: call(c, job_script, *case, name="job_script") for case in cases}
    if not all(isinstance(s, str) for s in scripts.values()):
        c.stop("job_script must return the script as a string", "return f'''#!/bin/bash ...'''")
        raise Stop
    problems = {"header": [], "resources": [], "launch": []}
    for (nodes, per_node, minutes, epochs), script in scripts.items():
        label = f"job_script({nodes}, {per_node}, {minutes}, {epochs})"
        options, ignored = sbatch_options(script)
        if not script.startswith("#!/bin/bash"):
            problems["header"].append(
                f"{label} starts with {script.splitlines()[0] if script else ''!r}"
            )
        if ignored:
            problems["header"].append(
                f"{label}: sbatch ignores {ignored[0]!r} (it comes after a command)"
            )
        want = {"--nodes": str(nodes), "--ntasks-per-node": str(per_node)}
        for opt, value in want.items():
            if opt not in options:
                problems["resources"].append(
                    f"{label}: no {opt} that sbatch reads (expected {value})"
                )
            elif options[opt] != value:
                problems["resources"].append(f"{label}: {opt}={options[opt]}, expected {value}")
        if "--time" not in options:
            problems["resources"].append(
                f"{label}: no --time that sbatch reads (expected {minutes} minutes)"
            )
        else:
            got_minutes = slurm_minutes(options["--time"] or "")
            if got_minutes is None or not np.isclose(got_minutes, minutes):
                problems["resources"].append(
                    f"{label}: --time={options['--time']} is not {minutes} minutes"
                )
        commands = [
            ln.strip()
            for ln in script.splitlines()
            if ln.strip() and not ln.strip().startswith("#")
        ]
        launch = [ln for ln in commands if re.search(r"\bsrun\b", ln)]
        if re.search(r"\b(mpirun|mpiexec|horovodrun)\b", script):
            problems["launch"].append(
                f"{label} starts the ranks with mpirun/horovodrun: srun starts one per task"
            )
        elif not launch or "--mpi=pmix" not in launch[0]:
            problems["launch"].append(f"{label}: no 'srun --mpi=pmix' line")
        elif not re.search(
            rf"python3? -m hvdcourse\.examples\.train_hvd\b.*--epochs[ =]{epochs}\b", launch[0]
        ):
            problems["launch"].append(
                f"{label}: the srun line does not run 'python -m hvdcourse.examples.train_hvd "
                f"--epochs {epochs}'"
            )
    hints = {
        "header": "sbatch reads #SBATCH lines only until the first command: put them all at the top",
        "resources": "#SBATCH --nodes=N, --ntasks-per-node=T (one task per rank), --time=HH:MM:SS",
        "launch": "srun --mpi=pmix python -m hvdcourse.examples.train_hvd --epochs E: Slurm starts the tasks, "
        "Horovod reads rank and size from PMIx",
    }
    for key, found in problems.items():
        c.judge(key, not found, "; ".join(found[:2]), hints[key])
    # a well-formed script earns its form's points only when it also asks for what it is given
    # or starts the training it is given: '#!/bin/bash' alone is clean and well-formed
    content = not problems["resources"] or not problems["launch"]
    empty = "the form counts together with the content: ask for the resources given, or launch the training"
    if not content and not problems["header"]:
        c.fail("header", empty, hints["resources"])
    finding = shellcheck(scripts[SLURM_CASES[0]])
    if finding or content:
        c.judge(
            "shellcheck",
            not finding,
            f"shellcheck: {finding}",
            "the Supercomputers talk's masks used ${fe}, which is never set, so every mask was empty: "
            "shellcheck catches that kind of mistake before a job wastes its queue time",
        )
    else:
        c.fail("shellcheck", empty, hints["launch"])


# ------------------------------------------------------------------ exercise 11
BUGGY_SCRIPT = "buggy_train_hvd.py"
BUG_KINDS = {
    # kind: hint when it is missed (where each mistake shows is the grader's key, not here)
    "undefined-name": "one line uses a name that is never defined (a copy-paste from the source guide)",
    "unsharded-data": "look at what model.fit trains on: is it this rank's part or everything?",
    "unscaled-lr": "with N workers the effective batch is N times larger: what should the rate be?",
    "warmup-argument": "compare the warm-up callback's arguments with Horovod's signature",
    "missing-broadcast": "how do the ranks come to start from the same weights?",
    "every-rank-checkpoints": "which ranks write the checkpoint files?",
    "unaveraged-metrics": "each rank validates on its own part: what makes the reported metrics the same?",
}
# Exercise 11's answer key (which lines show each mistake) is the grader's, in the instructor-only
# hvdcourse.course.grading.keys. The self-check holds only salted digests of the right (kind, line)
# pairs, so the answers cannot be printed from this module (as print(checks.BUG_KINDS) once did).
# The answer space is small (7 kinds x 32 lines): hashing every pair finds the key in a millisecond.
# That is acceptable: the self-check itself says right or wrong for any line a learner tries, so
# the digests tell nothing that calling the self-check 32 times per kind does not; what they stop is
# reading the key off the package instead of the script. The grader decides with the key itself
# (the judge passes it as the check's hidden option), and the two agree (a test compares them).
BUG_SALT = "hvdcourse-ex11-v1"
BUG_DIGESTS = {
    "undefined-name": frozenset({"87620504568f1511"}),
    "unsharded-data": frozenset({"3c44e902ea8609a3", "8cfab18a1f2be596"}),
    "unscaled-lr": frozenset({"6b783317a01274a6", "dd02f44308738922"}),
    "warmup-argument": frozenset({"274ddfccad7dbada"}),
    "missing-broadcast": frozenset(
        {"3900ef93241daa28", "43e87324a12db71b", "5a9d6b661ccfb1de", "b692fd003e6b3244"}
    ),
    "every-rank-checkpoints": frozenset({"60e122bd18efe193"}),
    "unaveraged-metrics": frozenset(
        {"2877986c549e35dc", "9a7def4a21568179", "c0496905bb8d853c", "c4727ddb4d828c11"}
    ),
}


def bug_digest(kind: str, line: int) -> str:
    """The salted digest of the pair (``kind``, ``line``) that :data:`BUG_DIGESTS` holds when right."""
    return hashlib.sha256(f"{BUG_SALT}:{kind}:{int(line)}".encode()).hexdigest()[:16]


MAX_KINDS_PER_LINE = 2  # a line may show two mistakes (a callback list missing two callbacks)


def buggy_script_lines() -> list:
    with open(paths.data_path(BUGGY_SCRIPT), encoding="utf-8") as fh:
        return fh.read().splitlines()


def show_buggy_script() -> None:
    """Print the script of exercise 11 with line numbers."""
    for number, line in enumerate(buggy_script_lines(), 1):
        print(f"{number:3d}  {line}")


@check(
    "ex11",
    "Find the bugs in a Horovod script",
    {kind: (f"finds '{kind}'", 1) for kind in BUG_KINDS},
    after="Next: check your own training script for these mistakes, and more, with "
    "'hvdcourse-lint my_train.py' (Converting to Horovod: going further, the section "
    "'Check your own script').",
)
def ex11_find_the_bug(c, bugs, hidden=None):
    """Exercise 11: ``bugs = {kind: line number}`` for the mistakes of the buggy script (``hidden``:
    the grader's key, ``{"lines": {kind: [line numbers]}}``; without it, the salted digests)."""
    key = (hidden or {}).get("lines")

    def right(kind, n):
        return n in key[kind] if key else bug_digest(kind, n) in BUG_DIGESTS[kind]

    if not isinstance(bugs, dict):
        c.stop(
            f"bugs must be a dict {{kind: line number}}, got {type(bugs).__name__}",
            "e.g. bugs = {'unscaled-lr': 21}",
        )
        raise Stop
    if not bugs:
        c.stop(
            "bugs is still empty.",
            "add one entry per mistake you find: {kind: line number}",
            status="not-done",
        )
        raise Stop
    unknown = [k for k in bugs if k not in BUG_KINDS]
    if unknown:
        c.stop(
            f"unknown kind(s) {unknown}; the kinds are {sorted(BUG_KINDS)}",
            "use the kind names exactly as listed",
        )
        raise Stop
    given = {}
    for kind in bugs:
        lines = bugs[kind] if isinstance(bugs[kind], (list, tuple, set)) else [bugs[kind]]
        try:
            given[kind] = {int(n) for n in lines}
        except (TypeError, ValueError):
            given[kind] = None
    # one line named for most kinds is a guess, not a finding: such a line counts for none of them
    shared = Counter(n for lines in given.values() if lines for n in lines)
    for kind, hint in BUG_KINDS.items():
        if kind not in bugs:
            c.fail(kind, "not found yet", hint)
            continue
        lines = given[kind]
        if lines is None:
            c.fail(
                kind,
                f"{bugs[kind]!r} is not a line number",
                "give the line number printed on the left",
            )
            continue
        crowded = sorted(n for n in lines if shared[n] > MAX_KINDS_PER_LINE)
        if crowded:
            c.fail(
                kind,
                f"line {fmt(crowded)} is given for {shared[crowded[0]]} kinds; a line counts for at "
                f"most {MAX_KINDS_PER_LINE}",
                "each mistake shows at a line of its own: " + hint,
            )
            continue
        wrong = sorted(n for n in lines if not right(kind, n))
        c.judge(
            kind,
            bool(lines) and not wrong,
            f"line {fmt(wrong or sorted(lines))} is not where this one shows",
            hint,
        )
