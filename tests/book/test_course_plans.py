"""The one-day and two-day plans (hvdcourse.course.book.course_map): the learner's first own
distributed run ends before lunch on day 1, no more than 90 minutes go by without a pause, and every
lesson comes after its prerequisites. Read from the plans' rows, not from the generator's own checks;
then the generator is shown to refuse a plan that breaks a rule."""

import pytest

from hvdcourse.course.book import course_map

PLANS = {
    "one day": course_map.one_day_plan,
    "two days": course_map.two_day_plan,
    "two days, PyTorch track": lambda: course_map.two_day_plan(track="pytorch"),
}
PAUSES = ("(break)", "(lunch)")


def minutes(time: str) -> int:
    hours, mins = time.split(":")
    return int(hours) * 60 + int(mins)


def title_of(lesson: str) -> str:
    return next(row["title"] for row in course_map.lessons() if row["lesson"] == lesson)


@pytest.fixture(scope="module", params=sorted(PLANS))
def plan(request):
    return PLANS[request.param]()


def test_first_own_run_ends_before_lunch_on_day_one(plan):
    rows = plan.to_dict("records")
    run = next(r for r in rows if r["lesson"] == title_of(course_map.FIRST_OWN_RUN))
    lunch = next(r for r in rows if r["day"] == 1 and r["lesson"] == "(lunch)")
    assert run["day"] == 1 and minutes(run["ends"]) <= minutes(lunch["starts"]), (
        f"the first own run ({course_map.FIRST_OWN_RUN}) ends day {run['day']} at {run['ends']}, "
        f"after lunch ({lunch['starts']})"
    )


def test_no_stretch_of_more_than_90_minutes_without_a_pause(plan):
    start = None
    for previous, row in zip([None] + plan.to_dict("records")[:-1], plan.to_dict("records")):
        if row["lesson"] in PAUSES:
            start = None
            continue
        if start is None or previous is None or previous["day"] != row["day"]:
            start = row["starts"]
        taught = minutes(row["ends"]) - minutes(start)
        assert taught <= 90, f"day {row['day']}: {taught} min without a pause from {start}"


def test_every_lesson_comes_after_its_prerequisites_in_the_plan(plan):
    by_title = {row["title"]: row["lesson"] for row in course_map.lessons()}
    order = [by_title[r] for r in plan["lesson"] if r in by_title]
    needs = course_map.prerequisites()
    for position, lesson in enumerate(order):
        for needed in needs[lesson]:
            assert needed in order[:position], (
                f"{lesson} comes before its prerequisite {needed}"
                if needed in order
                else f"{lesson} is taught, its prerequisite {needed} is left to self-study"
            )


def test_the_plan_reports_its_first_own_run_and_longest_stretch(plan):
    run = plan.attrs["first_own_run"]
    assert run["lesson"] == course_map.FIRST_OWN_RUN and run["day"] == 1
    assert minutes(run["ends"]) <= minutes(run["lunch"])
    assert plan.attrs["longest_stretch_min"] <= course_map.DAY["max_stretch"] == 90


def test_dropping_any_prefix_of_the_droppable_lessons_keeps_every_prerequisite():
    order = [row["lesson"] for row in course_map.lessons()]
    for count in range(len(course_map.DROPPABLE) + 1):
        dropped = course_map.DROPPABLE[:count]
        course_map.check_order([lesson for lesson in order if lesson not in dropped], dropped)


def test_the_generator_refuses_a_long_stretch_without_a_pause(monkeypatch):
    monkeypatch.setitem(course_map.DAY, "max_stretch", 40)
    with pytest.raises(ValueError, match="without a pause"):
        course_map.one_day_plan()


def test_the_generator_refuses_a_first_own_run_after_lunch(monkeypatch):
    monkeypatch.setattr(course_map, "FIRST_OWN_RUN", "06_timeline")
    with pytest.raises(ValueError, match="first own distributed run .* before lunch on day 1"):
        course_map.two_day_plan()


# ------------------------------------------------------------------- the PyTorch track (two days)


@pytest.fixture(scope="module")
def tracks():
    return {track: course_map.two_day_plan(track=track) for track in course_map.TRACKS}


def test_pytorch_track_teaches_exercise_15_in_class_on_a_day(tracks):
    plan = tracks["pytorch"]
    minutes_of_15 = dict(course_map.graded_exercises()[course_map.PYTORCH_LESSON])
    row = next(r for r in plan.to_dict("records") if r["lesson"].startswith(title_of("09_pytorch")))
    assert (
        row["day"] in (1, 2) and row["graded exercises"] == minutes_of_15["ex15_torch_conversion"]
    )
    assert "ex15_torch_conversion" in plan.attrs["in_class"]
    assert "ex15_torch_conversion" in tracks["keras"].attrs["homework"]


def test_pytorch_track_teaches_lesson_09_right_after_the_conversion_and_before_exercise_15(tracks):
    rows = [r["lesson"] for r in tracks["pytorch"].to_dict("records") if r["lesson"] not in PAUSES]
    conversion, pytorch = title_of("05_conversion"), title_of("09_pytorch")
    last_of_conversion = max(i for i, t in enumerate(rows) if t.startswith(conversion))
    assert rows[last_of_conversion + 1] == pytorch, rows
    # exercise 15 is on the page's row, or on a "(graded exercises)" row after it
    assert all(not t.startswith(pytorch) for t in rows[: last_of_conversion + 1])


def test_pytorch_track_leaves_the_keras_only_exercises_as_homework(tracks):
    plan = tracks["pytorch"]
    assert not set(course_map.KERAS_ONLY_EXERCISES) & set(plan.attrs["in_class"])
    in_class_keras = set(tracks["keras"].attrs["in_class"]) - set(course_map.KERAS_ONLY_EXERCISES)
    assert in_class_keras <= set(plan.attrs["in_class"]), "a framework-free exercise left the class"


def test_pytorch_track_keeps_the_day_structure(tracks):
    def days(plan):
        return {r["lesson"]: r["day"] for r in plan.to_dict("records") if r["lesson"] not in PAUSES}

    keras, pytorch = days(tracks["keras"]), days(tracks["pytorch"])
    moved = {
        t: (keras[t], pytorch.get(t))
        for t in keras
        if not t.startswith(title_of("09_pytorch")) and pytorch.get(t, keras[t]) != keras[t]
    }
    assert not moved, f"lessons on another day in the PyTorch track: {moved}"
    assert pytorch[title_of("09_pytorch")] == pytorch[title_of("05_conversion")] == 1


def test_an_unknown_track_is_refused():
    with pytest.raises(ValueError, match="unknown track 'jax'"):
        course_map.two_day_plan(track="jax")


def test_day_2_opens_with_the_recap_of_day_1(tracks):
    # book/recap_day2.md, the instructor guide and _toc.yml open day 2 with the 15-minute recap
    recap, minutes = course_map.RECAP
    for plan in tracks.values():
        first = next(r for r in plan.to_dict("records") if r["day"] == 2)
        assert first["lesson"] == recap and first["starts"] == course_map.clock(
            course_map.DAY["start"]
        )
        assert (
            course_map.minutes_of(first["ends"]) - course_map.minutes_of(first["starts"]) == minutes
        )
    assert recap not in set(course_map.one_day_plan()["lesson"])
