"""``hvdcourse-class``: run a class from one folder: release, collect, grade, return (lesson: Instructor guide).

The instructor's course folder holds the roster and everything the commands write: ``submitted/`` (the
collected notebooks the grader reads), ``archive/`` (earlier copies a re-collect replaced),
``collected.json`` (when each notebook was saved, late or not, who submitted nothing),
``grading/`` (each grader run), ``feedback/`` (per learner and exercise), ``gradebook.json`` (the
class's points, merged run by run, with the marks given by hand) and ``answers/`` (the written answers,
one file per question). Modules: :mod:`~.layout` (the folder, the exercises), :mod:`~.roster` (learners,
their homes, writing as them), :mod:`~.handout` (release, collect, return), :mod:`~.gradebook`,
:mod:`~.grade`, :mod:`~.answers` and :mod:`~.cli`.
"""
