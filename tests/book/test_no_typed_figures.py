"""Measured figures reach the book's prose only through glue or committed data, never typed.

A number with a unit of time, rate, share or size (ms, s, img/s, %, GB/s, a speed-up "1.8x", MB,
GiB) in the prose of a page (code cells, inline code, math, roles such as {glue:text} and
{execution-time}, and links left out) is either computed by the page or read from book/data, or it
is a constant listed below with why it is one. A figure that a run or a model gives must be glued;
adding it here is wrong.

The same holds for words that state a ratio ("tenfold", "halves", "doubles", "a third of", "twice
as"): those that hold by construction are listed in RATIO_CONSTANTS with why.

And a conclusion typed next to a glued verdict must agree with it, whatever the run gives: a verdict
is a value that a cell picks among words ("helped" if ... else "did not help"), so the prose beside
it may not type one of its outcomes, or a word that says one (SAYS), which would contradict the
page on a machine where the run comes out the other way.
"""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = sorted(
    f"notebooks/{name}"
    for name in os.listdir(os.path.join(ROOT, "notebooks"))
    if name.endswith(".md")
)
PAGES += [
    "book/intro.md",
    "book/setup.md",
    "book/instructor_guide.md",
    "book/conversion_further.md",
    "book/performance_further.md",
    "book/model_parallel_further.md",
    "book/ray_train_further.md",
    "book/slurm_further.md",
    "book/allreduce_further.md",
    "book/errata.md",
]

UNIT = (
    r"(?:img/s|images/s|samples/s|ms|µs|s|seconds|%|MB/s|GB/s|GiB/s|Gbit/s|Gb/s|TB/s"
    r"|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB|x(?!\s*\d)|×(?!\s*\d))"
)
FIGURE = re.compile(r"(?<![\w.$/-])(\d+(?:[.,]\d+)*)\s?(" + UNIT + r")(?![\w/])")

# Constants, by page: each is a specification, a default or a setting, or a figure quoted from a
# source document with its source named in the sentence; none is a result of this course's runs.
CONSTANTS = {
    # LUMI-G and Grace-Hopper node specifications (vendor and centre documentation); "40 %" is the
    # stated assumption of the training-time estimate
    "notebooks/01_why_distributed.md": {
        "200 Gb/s",
        "36 GB/s",
        "25 GB/s",
        "800 Gb/s",
        "1.6 TB/s",
        "900 GB/s",
        "450 GB/s",
        "40 %",
        # memory of the same nodes: a GCD's, an MI250X's, the CPU's, a GH200's
        "64 GB",
        "128 GB",
        "512 GB",
        "96 GB",
        "144 GB",
    },
    # Horovod's default stall-check time (HOROVOD_STALL_CHECK_TIME_SECONDS)
    "notebooks/02_parallelism.md": {"60 s"},
    # the Slingshot-11 link of the cost model's example; the line rate of InfiniBand HDR and the two
    # latencies quoted with their sources (WWT's Ethernet kernel-to-kernel, Microsoft's HBv3 RDMA)
    # the cost model's two example messages (ResNet-50's float32 gradient, a small one) and the
    # default sizes of the interconnect check it names
    "notebooks/03_allreduce.md": {"25 GB/s", "100 MB"},
    # continued from lesson 03: the line rate of InfiniBand HDR and the two latencies quoted with
    # their sources, the example messages, and the default sizes of the interconnect check it names
    "book/allreduce_further.md": {
        "200 Gb/s",
        "50 µs",
        "1.2 µs",
        "100 MB",
        "64 KiB",
        "4 KiB",
        "64 MiB",
    },
    # Horovod's defaults (cycle time) and the course's stall-check settings
    # and the fusion buffer's default size
    "notebooks/04_horovod_design.md": {"1 ms", "20 s", "60 s", "128 MiB"},
    # a LUMI-G node's memory
    "book/conversion_further.md": {"512 GB"},
    # the cycle-time default, old default and the setting the page runs; "8 ms" is arithmetic (8 x 1 ms)
    # the fusion buffer's default size and the threshold the exercise sets
    "notebooks/06_timeline.md": {"1 ms", "5 ms", "10 ms", "8 ms", "128 MiB", "64 KiB"},
    # defaults and settings (cycle time, monitor period), quoted published figures (88 % from the
    # Horovod paper, 1.2x from the Ray talk, 10 and 25 Gbit/s of their clusters), "2 x one core" and
    # "100 % busy" as concepts
    "notebooks/07_performance.md": {
        "1 ms",
        "0.1 ms",
        "0.25 s",
        "88 %",
        "1.2 x",
        "10 Gbit/s",
        "2 x",
        "100 %",
        # the fusion buffer's default, the sweep's smallest and largest messages, the kernel's page
        # sizes (4 KB, huge: 2 MB) and Open MPI's ring segment
        "128 MiB",
        "4 KB",
        "64 MB",
        "2 MB",
    },
    # continued from lesson 07: the sweep's smallest and largest messages, Open MPI's ring segment,
    # the kernel's page size, and the published figures it reads (88 % and 25 Gbit/s from the
    # Horovod paper, 10 Gbit/s of the V100 cluster, 1.2x from the Ray talk)
    "book/performance_further.md": {
        "4 KB",
        "64 MB",
        "1 MB",
        "88 %",
        "25 Gbit/s",
        "10 Gbit/s",
        "1.2 x",
    },
    # Horovod's default stall-check time, an exercise's restart time, and the Slurm signal's lead time
    "notebooks/10_fault_tolerance.md": {"60 s", "120 s"},
    # Horovod's fusion buffer and DDP's first bucket: their defaults
    "notebooks/09_pytorch.md": {"128 MiB", "1 MiB"},
    # the memory of the source's GPUs (Titan RTX, V100)
    "book/errata.md": {"24 GB", "32 GB"},
    # the memory to give a container's Linux VM (a recommendation)
    "book/setup.md": {"8 GB"},
    # the class hub's settings: the time each learner's server gets to answer (hubconfig.py's
    # start_timeout and http_timeout) and JupyterHub's default for it, which it replaces
    "book/instructor_guide.md": {"300 s", "90 s"},
}


def prose(text: str) -> str:
    """The page's text as a reader sees it typed: no front matter, code, math, roles or link targets."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1\s*$", "", text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", "", text)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", "", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    # planned, not measured
    return re.sub(r"\*\*Time\*\*: teaching \d+ min, exercises \d+ min", "", text)


def typed_figures(text: str) -> list:
    return [f"{number} {unit}" for number, unit in FIGURE.findall(prose(text))]


@pytest.mark.parametrize("page", PAGES)
def test_page_types_no_measured_figure(page):
    typed = typed_figures(open(os.path.join(ROOT, page)).read())
    unexplained = sorted({figure for figure in typed} - CONSTANTS.get(page, set()))
    assert not unexplained, (
        f"{page} types {unexplained}: glue them from the cell or the book/data file "
        "that produced them (or, for a constant, list it in CONSTANTS with why)"
    )


def test_every_listed_constant_is_still_on_its_page():
    for page, constants in CONSTANTS.items():
        typed = set(typed_figures(open(os.path.join(ROOT, page)).read()))
        assert constants <= typed, (
            f"{page}: {sorted(constants - typed)} are gone; drop them from CONSTANTS"
        )


def test_the_scan_sees_a_typed_figure_and_ignores_glued_and_coded_ones():
    page = (
        "A run took 42 s and 1,234.5 img/s (85%).\n\n"
        "Glued: {glue:text}`speed:.0f` img/s, in code `3 s`, in math $2 x$.\n\n"
        "```{code-cell} ipython3\nprint('9 ms')\n```\n"
    )
    assert typed_figures(page) == ["42 s", "1,234.5 img/s", "85 %"]


# ------------------------------------------------------------------- words that state a measured ratio
# "tenfold", "halves", "doubles", "a third of", "twice as ...": a ratio that a run gives is glued like
# any figure. "Recursive doubling" and "halving-doubling" are algorithms' names, not ratios.
RATIO = re.compile(
    r"(?<![\w-])(?<!recursive )("
    r"(?:two|three|four|five|ten|twenty|hundred|thousand|many)fold|\d+-fold"
    r"|halve[sd]?|halving|double[sd]?|doubling|triple[sd]?|tripling|quadruple[sd]?"
    r"|twice as|half as|(?:a|one|two) (?:third|quarter)s? (?:of|as)|three quarters (?:of|as)"
    r")(?![\w-])",
    re.I,
)


# Ratios that hold by construction, by page, with why; a ratio a run gives is never listed here.
RATIO_CONSTANTS = {
    # 2 workers at the same per-worker batch: half the steps, each on twice the images
    "notebooks/05_conversion.md": {"half as many", "half as many updates", "twice as large"},
    # linear scaling on 2 workers doubles the rate
    "book/conversion_further.md": {"doubles"},
    # data parallelism on 2 GPUs splits each step's compute in two
    "book/performance_further.md": {"halve the compute", "halve"},
    # the rule of thumb the sentence derives: two matrix products per layer backward, one forward
    "notebooks/13_model_parallelism.md": {"twice as long as"},
    # 16-bit numbers against 32-bit ones
    "notebooks/12_data_parallel_at_scale.md": {"halves the activations'", "halves the bytes"},
    # one worker of two doing the steps of both
    "notebooks/15_ray_train.md": {"twice as many steps"},
    # the grading rule itself (a bound the checks are held to), not a measured ratio
    "book/instructor_guide.md": {"a quarter of an exercise's", "a quarter of them for"},
}


def ratio_words(text: str) -> list:
    """Each ratio word of the prose with the (up to) two words after it in its sentence, lower case:
    "halves the bytes", "twice as many", "doubles"."""
    found = []
    prose_text = prose(text)
    for match in RATIO.finditer(prose_text):
        rest = re.split(r"[.,;:!?()]", prose_text[match.end() : match.end() + 60], maxsplit=1)[0]
        found.append(" ".join([match.group(1)] + re.findall(r"[\w']+", rest)[:2]).lower())
    return found


# ------------------------------------------------------------ typed conclusions beside glued verdicts
# A verdict is a glued value that a cell chooses among string literals ("helped" if ... else "did not
# help", nested, or a variable assigned that way anywhere on the page). The prose next to it (its
# sentence and the next) must not type one of its outcomes, or a word that says one: whatever the
# run gives, the verdict would contradict it on a machine where it comes out the other way.
SAYS = {
    "higher": ("higher", "ahead", "above", "better"),
    "lower": ("lower", "behind", "below", "worse", "lags", "needs more epochs"),
    "within noise": ("within noise", "same number of epochs", "no difference", "cannot tell"),
    "faster": ("faster", "speeds up"),
    "slower": ("slower", "slows down"),
    "helped": ("helped", "helps", "biggest win"),
    "did not help": ("did not help", "does not help"),
    "saves time": ("saves time", "faster"),
    "costs time": ("costs time", "slower"),
    "changes little": ("changes little", "gains little", "no gain"),
    "fell": ("fell", "dropped"),
    "rose": ("rose", "grew"),
}
CELL = re.compile(r"^(`{3,})\{code-cell\}[^\n]*\n(.*?)^\1\s*$", re.S | re.M)
ROLE = re.compile(r"\{glue(?::text|:md)?\}`([^`:]+)[^`]*`")


def _cell_code(body: str) -> str:
    """A code cell's Python: without its option block and IPython's magics and shell lines."""
    body = re.sub(r"\A---\n.*?\n---\n", "", body, flags=re.S)
    keep = [
        line
        for line in body.splitlines()
        if not line.lstrip().startswith(("%", "!")) and not re.match(r"^:[\w-]+:", line)
    ]
    return "\n".join(keep)


def _outcomes(node, assigned: dict):
    """The strings an expression chooses among ("a" if c else "b", nested; or such a variable), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        body, orelse = _outcomes(node.body, assigned), _outcomes(node.orelse, assigned)
        return body | orelse if body is not None and orelse is not None else None
    if isinstance(node, ast.Name):
        return assigned.get(node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return assigned.get(node.func.id + "()")  # a function of the page that returns a verdict
    return None


def _name_pattern(node):
    """(regex, literal length) of a glued name: 'key' or f'{key}_{when}'; None for other expressions."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value), len(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = [
            re.escape(part.value) if isinstance(part, ast.Constant) else ".+"
            for part in node.values
        ]
        literal = sum(len(p.value) for p in node.values if isinstance(p, ast.Constant))
        return "".join(parts), literal
    return None


def glued_verdicts(text: str) -> list:
    """[(name regex, literal length, outcomes or None)] for every glue(name, value) of the page's cells."""
    trees = []
    for _, body in CELL.findall(text):
        try:
            trees.append(ast.parse(_cell_code(body)))
        except SyntaxError:
            continue
    assigned = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, found = node.targets[0], _outcomes(node.value, {})
                if isinstance(target, ast.Name) and found and len(found) > 1:
                    assigned.setdefault(target.id, set()).update(found)
    for tree in trees:  # functions that return a verdict (alone, not in a tuple)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for ret in (n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value):
                    found = _outcomes(ret.value, assigned)
                    if found and len(found) > 1:
                        assigned.setdefault(node.name + "()", set()).update(found)
    glued = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "glue":
                if len(node.args) >= 2 and _name_pattern(node.args[0]):
                    glued.append((*_name_pattern(node.args[0]), _outcomes(node.args[1], assigned)))
    return glued


def _sentences(text: str) -> list:
    """The prose's sentences, roles kept, each paragraph and list item apart (code, math left out)."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1\s*$", "\n\n", text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    blocks = re.split(r"\n\s*\n|\n(?=\s*(?:[*-]|\d+\.)\s)", text)
    sentences = []
    for block in blocks:
        flat = " ".join(block.split())
        sentences += [(len(sentences), s) for s in re.split(r"(?<=[.!?])\s+(?=[A-Z{*(])", flat)]
        sentences.append((None, ""))  # a block's end: the window stops there
    return [s for _, s in sentences]


def typed_conclusions(text: str) -> list:
    """(phrase, glued name, outcomes) for each outcome typed next to a glued verdict of the page."""
    verdicts = glued_verdicts(text)
    sentences = _sentences(text)
    found = []
    for i, sentence in enumerate(sentences):
        for key in ROLE.findall(sentence):
            matches = [(lit, out) for pat, lit, out in verdicts if re.fullmatch(pat, key)]
            if not matches:
                continue
            outcomes = max(matches, key=lambda m: m[0])[1]
            if not outcomes or len(outcomes) < 2:
                continue
            window = " ".join(sentences[i : i + 2]) if sentences[i + 1 : i + 2] else sentence
            typed = re.sub(r"\{[\w:-]+\}`[^`]*`|`[^`\n]*`|\$[^$\n]+\$", " ", window).lower()
            for outcome in sorted(outcomes):
                for phrase in SAYS.get(outcome.lower(), (outcome.lower(),)):
                    if re.search(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", typed):
                        found.append((phrase, key, tuple(sorted(outcomes))))
    return sorted(set(found))


@pytest.mark.parametrize("page", PAGES)
def test_page_types_no_measured_ratio_in_words(page):
    typed = set(ratio_words(open(os.path.join(ROOT, page)).read()))
    unexplained = sorted(typed - RATIO_CONSTANTS.get(page, set()))
    assert not unexplained, (
        f"{page} states {unexplained} in words: a ratio that a run gives is glued like any figure "
        "(or, where it holds by construction, list it in RATIO_CONSTANTS with why)"
    )


def test_every_listed_ratio_word_is_still_on_its_page():
    for page, phrases in RATIO_CONSTANTS.items():
        typed = set(ratio_words(open(os.path.join(ROOT, page)).read()))
        assert phrases <= typed, (
            f"{page}: {sorted(phrases - typed)} are gone; drop them from RATIO_CONSTANTS"
        )


@pytest.mark.parametrize("page", PAGES)
def test_no_typed_conclusion_beside_a_glued_verdict(page):
    typed = typed_conclusions(open(os.path.join(ROOT, page)).read())
    assert not typed, "; ".join(
        f"{page} types '{phrase}' next to the glued verdict {key}, which can say {list(outcomes)}: "
        "glue the conclusion with the verdict, or say what holds for every outcome"
        for phrase, key, outcomes in typed
    )


def test_the_scan_sees_typed_sizes_and_ratio_words_but_not_algorithms_names():
    page = (
        "The buffer holds 64 MB (128 MiB by default, 4 KiB pages, 1.5 GB/s).\n\n"
        "Fusion halves the step time; it is tenfold faster, a third of the time, twice as fast.\n\n"
        "MPI uses recursive doubling and halving-doubling; a third rank joins; the manifold folds.\n"
    )
    assert typed_figures(page) == ["64 MB", "128 MiB", "4 KiB", "1.5 GB/s"]
    assert ratio_words(page) == [
        "halves the step",
        "tenfold faster",
        "a third of the time",
        "twice as fast",
    ]


# the verdict of lesson 5's comparison, glued, and what the prose may and may not say beside it
VERDICT_CELL = (
    "```{code-cell} ipython3\n"
    "def compare(diff, noise):\n"
    '    verdict = "within noise" if abs(diff) < 2 * noise else ("higher" if diff > 0 else "lower")\n'
    "    return diff, verdict\n"
    'for key, when in (("scaled_vs_unscaled", "first"),):\n'
    "    diff, verdict = compare(0.1, 0.01)\n"
    '    glue(f"{key}_{when}", verdict, display=False)\n'
    '    glue(f"{key}_{when}_diff", float(diff), display=False)\n'
    "```\n\n"
)


def test_a_conclusion_typed_after_a_verdict_that_can_say_within_noise_is_caught():
    page = VERDICT_CELL + (
        "After epoch 1 the scaled run is {glue:text}`scaled_vs_unscaled_first` "
        "({glue:text}`scaled_vs_unscaled_first_diff:+.3f`). An unscaled run needs more epochs.\n"
    )
    assert typed_conclusions(page) == [
        ("needs more epochs", "scaled_vs_unscaled_first", ("higher", "lower", "within noise"))
    ]


def test_a_glued_conclusion_or_a_neutral_sentence_beside_a_verdict_passes():
    page = VERDICT_CELL + (
        "After epoch 1 the scaled run is {glue:text}`scaled_vs_unscaled_first` "
        "({glue:text}`scaled_vs_unscaled_first_diff:+.3f`). {glue:md}`unscaled_conclusion`\n\n"
        "Higher is better, in a later paragraph.\n"
    )
    assert typed_conclusions(page) == []


def test_a_verdict_word_typed_in_the_same_sentence_is_caught_and_a_number_is_no_verdict():
    page = (
        "```{code-cell} ipython3\n"
        "glue('huge_pages_verdict', 'helped' if change > 0 else 'did not help', display=False)\n"
        "glue('huge_pages_hvd', change, display=False)\n"
        "```\n\n"
        "Huge pages changed the rate by {glue:text}`huge_pages_hvd:+.0%`, so they helped.\n\n"
        "For the Horovod run they {glue:text}`huge_pages_verdict`, which helped the most.\n"
    )
    assert typed_conclusions(page) == [("helped", "huge_pages_verdict", ("did not help", "helped"))]


def test_a_verdict_returned_by_a_function_of_the_page_is_a_verdict_too():
    page = (
        "```{code-cell} ipython3\n"
        "def verdict(ratio):\n"
        '    return "faster" if ratio > 1 else "slower"\n'
        'glue("hvd_vs_ddp", verdict(rate), display=False)\n'
        "```\n\n"
        "Here Horovod is {glue:text}`hvd_vs_ddp` than DDP. DDP is slower on every machine.\n"
    )
    assert typed_conclusions(page) == [("slower", "hvd_vs_ddp", ("faster", "slower"))]
