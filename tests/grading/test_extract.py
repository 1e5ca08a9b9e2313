"""What the grader keeps of a notebook to judge its answers (hvdcourse/course/grading/extract.py)."""

import json
import subprocess
import sys

import nbformat

from hvdcourse.course.grading.extract import extract


def _nb(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


def test_definitions_imports_and_constants_are_kept_calls_are_left_out():
    out = extract(
        _nb(
            "import numpy as np\nx = np.pi * 2\nnp.save('x', 1)",
            "def f(a, b=1):\n    return a\nbugs = {'a': 1}",
        )
    )
    assert {n: f["kind"] for n, f in out.bound.items()} == {
        "np": "import",
        "x": "value",
        "f": "function",
        "bugs": "literal",
    }
    assert out.bound["bugs"]["value"] == {"a": 1} and out.left_out == [(1, 3, "a call")]


def test_code_that_would_run_at_definition_time_is_left_out():
    out = extract(
        _nb(
            "def f(x=open('/tmp/x', 'w')):\n    pass",
            "class A:\n    def __init_subclass__(cls):\n        pass",
            "@attack\ndef g():\n    pass",
            "y = [open('/tmp/y')]",
            "class B(metaclass=M):\n    pass",
        )
    )
    assert out.bound == {} and {"A", "B", "f", "g", "y"} <= set(out.dropped_names)


def test_an_untouched_answer_is_seen_as_the_placeholder_from_the_text():
    out = extract(
        _nb('def global_mean(hvd, v):\n    raise NotImplementedError("Exercise 2: here")')
    )
    assert out.facts("global_mean") == {"kind": "function", "placeholder": True, "cell": 1}


def test_magics_do_not_stop_the_cell_from_being_read():
    out = extract(_nb("%matplotlib inline\n!ls\ndef f():\n    return 1"))
    assert out.bound["f"]["kind"] == "function" and out.unparsable == []


DEFERRED_PROBE = r"""
import json, os, sys, tempfile
import cloudpickle
from hvdcourse.course.grading.answers import Deferred, load_definitions

cells = "import tensorflow as tf\nfrom math import sqrt\n\ndef make():\n    return int(tf.constant(4)) + sqrt(4)\n"
job = {"cells": [[1, cells, [[1, 0], [2, 0], [4, 0]]]]}
module, errors = load_definitions(job, tempfile.mkdtemp())
before = "tensorflow" in sys.modules
value = cloudpickle.loads(cloudpickle.dumps(module.make))()  # as a rank receives it
print(json.dumps({"errors": errors, "deferred": isinstance(module.tf, Deferred),
                  "sqrt_is_real": not isinstance(module.sqrt, Deferred), "before": before, "value": value}))
"""


def test_the_answer_run_defers_framework_modules_until_a_rank_uses_them():
    """``import tensorflow as tf`` costs the trusted answer process nothing until a function uses it
    (the ranks import it when they unpickle the function); ``from X import name`` is imported at once,
    since the checks may call what it binds."""
    run = subprocess.run(
        [sys.executable, "-c", DEFERRED_PROBE], capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found == {
        "errors": [],
        "deferred": True,
        "sqrt_is_real": True,
        "before": False,
        "value": 6.0,
    }
