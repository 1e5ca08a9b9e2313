"""The book's order has no forward prerequisite: every lesson's ``**Prerequisites**`` line names only
lessons that come before it in ``_toc.yml``, and no lesson speaks of a later one as already taught.

Labels are mapped to lessons through the ``(label)=`` lines of ``notebooks/*.md``
(hvdcourse.course.book.course_map). The second check is a heuristic: a sentence of a lesson's prose
that refers (``{ref}``) to a later lesson and has a past-tense cue ("showed", "we saw", "earlier",
"recall", "as in {ref}...") is reported; forward pointers in the present or future ("{ref}`x`
shows", "later in the book") pass.
"""

import re

import pytest

from hvdcourse.course.book import course_map

PAST_CUE = re.compile(
    r"\b(?:showed|saw|seen|earlier|recall|already|as before|learned|learnt"
    r"|we (?:measured|ran|used|built|met|wrote|timed|trained|found|compared)"
    r"|(?:was|were|we|you) (?:introduced|taught|shown))\b"
    r"|\bas in \{ref\}",
    re.I,
)
REF = re.compile(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([\w-]+)>?`")
# fenced blocks whose content is prose (an exercise's question, a note); every other fenced block
# (code cells, included files, graphs) is skipped
PROSE_DIRECTIVES = {"exercise", "note", "warning", "tip", "important", "admonition", "seealso"}


def prose_sentences(text: str) -> list:
    """The sentences of a lesson's prose: no front matter, code cells or other code blocks."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    lines, skipping = [], None
    for line in text.splitlines():
        if skipping:
            if line.strip() == skipping:
                skipping = None
            continue
        fence = re.match(r"^(`{3,})\s*(?:\{([\w-]+)\}|\w*)", line)
        if fence:
            if fence.group(2) not in PROSE_DIRECTIVES and line.strip() != fence.group(1):
                skipping = fence.group(1)
            lines.append("")
            continue
        if re.match(r"^:{3,}", line) or re.match(r"^:[\w-]+:", line):  # colon fences, options
            lines.append("")
            continue
        lines.append(line)
    sentences = []
    for paragraph in re.split(r"\n\s*\n|\n(?=\s*[-*+] |\s*\d+\. )", "\n".join(lines)):
        joined = " ".join(paragraph.split())
        sentences += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z{(`*\[])", joined) if s]
    return sentences


def past_references(text: str, later: set) -> list:
    """(label, sentence) for each sentence of ``text`` that refers to a label in ``later`` as if its
    lesson had already been taught."""
    found = []
    for sentence in prose_sentences(text):
        named = [label for label in REF.findall(sentence) if label in later]
        if named and PAST_CUE.search(sentence):
            found += [(label, sentence) for label in named]
    return found


def later_labels(lesson: str) -> set:
    order = [row["lesson"] for row in course_map.lessons()]
    return {
        label
        for label, owner in course_map.labels().items()
        if order.index(owner) > order.index(lesson)
    }


def test_every_lesson_has_a_prerequisites_line():
    missing = [
        lesson
        for lesson, text in course_map.lesson_texts().items()
        if course_map.prerequisite_labels(text) is None
    ]
    assert not missing, f"lessons without a **Prerequisites** line in their Overview: {missing}"


def test_prerequisite_labels_are_read_from_the_overview_line_only():
    text = (
        "(later)=\n# A lesson\n\n**Objectives**: see {ref}`objective`.\n\n"
        "**Prerequisites**: {ref}`first` (a note), {ref}`the second <second>`;\n"
        "{ref}`third` helps.\n\n**Time**: teaching 10 min\n\nSee {ref}`elsewhere`.\n"
    )
    assert course_map.prerequisite_labels(text) == ["first", "second", "third"]
    assert course_map.prerequisite_labels("# A lesson without one\n") is None


def test_every_prerequisite_comes_before_its_lesson_in_the_toc():
    course_map.check_order([row["lesson"] for row in course_map.lessons()])


def test_a_forward_prerequisite_is_named_with_its_lesson():
    with pytest.raises(
        ValueError, match="05_conversion names 04_horovod_design as a prerequisite, "
    ):
        course_map.check_order(["01_why_distributed", "05_conversion", "04_horovod_design"])


def test_a_dropped_prerequisite_of_a_kept_lesson_is_named():
    with pytest.raises(ValueError, match="15_ray_train names 09_pytorch .* drops"):
        course_map.check_order(
            [row["lesson"] for row in course_map.lessons() if row["lesson"] != "09_pytorch"],
            dropped=("09_pytorch",),
        )


def test_the_detector_flags_a_later_lesson_spoken_of_as_taught():
    text = (
        "Ring costs were measured.\n{ref}`ray-train` showed the three answers one at a time; here\n"
        "they meet. As in {ref}`slurm`, we start ranks. Recall from {ref}`install` how it builds.\n"
    )
    assert [label for label, _ in past_references(text, {"ray-train", "slurm", "install"})] == [
        "ray-train",
        "slurm",
        "install",
    ]


def test_the_detector_lets_forward_pointers_and_earlier_lessons_pass():
    text = (
        "{ref}`ray-train` shows the three answers. Later in the book, {ref}`install` builds it.\n"
        "As we saw in {ref}`allreduce`, the ring sends twice.\n\n"
        "```{code-cell} ipython3\n# we saw {ref}`ray-train` earlier\n```\n"
    )
    assert past_references(text, {"ray-train", "install"}) == []


def test_the_detector_reads_exercises_and_lists_as_prose():
    text = (
        "```{exercise} Ring-1: a question\n:label: ring-ex\n\n"
        "With the timings {ref}`performance` showed, predict the time.\n```\n\n"
        "- a first item with {ref}`performance`\n- recall the ring\n"
    )
    assert [label for label, _ in past_references(text, {"performance"})] == ["performance"]


def test_no_lesson_speaks_of_a_later_lesson_as_taught():
    found = [
        f"{lesson}: {{ref}}`{label}` (a later lesson) in: {sentence}"
        for lesson, text in course_map.lesson_texts().items()
        for label, sentence in past_references(text, later_labels(lesson))
    ]
    assert not found, "rephrase as a forward pointer ('X shows', 'later'):\n" + "\n".join(found)


def test_a_planted_past_reference_in_a_lesson_is_found():
    text = course_map.lesson_texts()["05_conversion"]
    planted = text + "\nAs {ref}`fault-tolerance` showed, a resumed run is exact.\n"
    assert past_references(text, later_labels("05_conversion")) == []
    assert [label for label, _ in past_references(planted, later_labels("05_conversion"))] == [
        "fault-tolerance"
    ]


def test_the_lessons_a_plan_can_leave_to_self_study_say_so_in_their_overview():
    optional = set(course_map.DROPPABLE) | set(course_map.ONE_DAY_DROPPABLE)
    marked = {
        lesson
        for lesson, text in course_map.lesson_texts().items()
        if "**Optional**:" in text.split(":::{admonition} Overview", 1)[1].split("\n:::", 1)[0]
    }
    assert marked == optional, {"unmarked": optional - marked, "never dropped": marked - optional}
