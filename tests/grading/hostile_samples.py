"""Hostile submissions: a student who wants marks without doing the work (issue 12).

Each attack is a cell put first in a learner notebook whose answers are left untouched (or, for the
"wrong answers look right" attacks, in a notebook with bob's wrong answer). The grader must give
the untouched ones 0 and the wrong ones exactly the points of the wrong answer alone.
"""

from __future__ import annotations

import os

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CANARY = "/tmp/hvdcourse-hostile-canary"

ATTACKS = {
    "patch_check_classes": """from hvdcourse.course.exercises import result, checks, checks_basic
result.CheckResult.score = property(lambda self: self.max_score)
result.CheckResult.passed = property(lambda self: True)
result.Checker.fail = result.Checker.ok
checks_basic.require_function = lambda *a, **k: None
for ex in checks.EXERCISES.values():
    object.__setattr__(ex, "check", lambda *a, **k: None)
""",
    "forge_result_lines": """import sys, json, re
class Rewriter:
    def __init__(self, s): self.s = s
    def write(self, t):
        t = re.sub(r'"score": [0-9.]+', '"score": 5', t).replace('"passed": false', '"passed": true')
        return self.s.write(t)
    def __getattr__(self, n): return getattr(self.s, n)
sys.stdout = Rewriter(sys.stdout)
print('HVDCOURSE-RESULT 0 {"exercise": "ex01", "score": 5, "max_score": 5, "passed": true, "findings": []}')
""",
    "replace_builtins": """import builtins
builtins.NotImplementedError = type("NotImplementedError", (Exception,), {})
builtins.isinstance = lambda *a: True
builtins.callable = lambda *a: True
builtins.all = lambda *a: True
builtins.any = lambda *a: False
""",
    "edit_course_files": """import ctypes, os, hvdcourse
root = os.path.dirname(hvdcourse.__file__)
target = os.path.join(root, "exercises", "result.py").encode()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
fh = libc.fopen(target, b"a")
if fh:
    libc.fputs(b"\\nCheckResult.score = property(lambda self: self.max_score)\\n", ctypes.c_void_p(fh))
    libc.fclose(ctypes.c_void_p(fh))
for name in ("judge.py", "extract.py"):
    try:
        open(os.path.join(root, "grading", name), "a").write("\\n# hacked\\n")
    except OSError as err:
        print("denied", err)
""",
    "read_keys_from_proc": """import os, glob
found = dict(os.environ)
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        found[path] = open(path, "rb").read()[:2000]
    except OSError:
        pass
leaked = [k for k, v in found.items() if b"TOKEN" in (v if isinstance(v, bytes) else v.encode())]
print(len(leaked), "environments with a token readable")
""",
    "kill_or_stop_the_checker": """import os, signal
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"hvdcourse.course.grading" in cmd or b"pytest" in cmd:
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                try:
                    os.kill(int(pid), sig)
                except OSError as err:
                    print("could not signal", pid, err)
""",
    "forge_score_files": """import glob, json, os
forged = {"records": {}, "errors": []}
result = {"exercise": "ex01", "title": "x", "findings": [{"criterion": "all", "points": 5, "passed": True,
          "detail": "", "hint": ""}], "problem": "", "problem_hint": "", "status": "checked"}
for pattern in ("/tmp/hvdg-*/a*", "/tmp/hvdg-*/p*", "/tmp/hvdg-*", "/tmp/*", os.path.expanduser("~")):
    for folder in glob.glob(pattern):
        for name in ("answers.json", "report.json", "results.json", "scores.csv"):
            try:
                with open(os.path.join(folder, name), "w") as fh:
                    fh.write(json.dumps({"results": [result], **forged}) if name.endswith("json")
                             else "student,ex01\\nme,5\\n")
            except OSError:
                pass
""",
    "patch_numpy_and_mpi4py": """import numpy as np, os, site, sys
np.allclose = lambda *a, **k: True
np.isclose = lambda *a, **k: True
home = os.path.expanduser("~")
for folder in {os.getcwd(), home, site.getusersitepackages()}:
    os.makedirs(folder, exist_ok=True)
    for name in ("numpy.py", "mpi4py.py", "sitecustomize.py", "usercustomize.py"):
        with open(os.path.join(folder, name), "w") as fh:
            fh.write("import builtins\\nbuiltins.NotImplementedError = KeyError\\n")
os.environ["PYTHONPATH"] = os.getcwd()
""",
    "code_in_definitions": f'''import os
def _mark(what):  # the folder of the process that ran it: s<n> (notebook run) or a<n> (answer run)
    with open("{CANARY}-" + what, "a") as fh:
        fh.write(os.path.basename(os.getcwd()) + "\\n")
def helper(x=_mark("default")):
    return x
class Sneaky:
    def __init_subclass__(cls):
        _mark("subclass")
class Child(Sneaky):
    pass
after_collectives_backup = [_mark("assign")]
''',
    "exec_a_fake_answer_and_exit": """exec("def after_collectives(values):\\n    from hvdcourse.course.exercises.checks_basic import expected_collectives\\n"
     "    return expected_collectives(values)")
import os
os._exit(0)
""",
    "fork_bomb_and_memory": """import os, numpy as np
try:
    big = np.ones(2_000_000_000)
except MemoryError as err:
    print("memory limit:", err)
pids = []
try:
    for _ in range(100_000):
        pid = os.fork()
        if pid == 0:
            import time; time.sleep(60); os._exit(0)
        pids.append(pid)
except OSError as err:
    print("process limit after", len(pids), err)
""",
}
# attacks on a WRONG answer that try to make it look right: the score must stay the wrong answer's
WRONG_LOOKS_RIGHT = ("patch_numpy_and_mpi4py", "patch_check_classes", "replace_builtins")


def build(out: str, bob_ex01: str, attacks: dict | None = None) -> dict:
    """Write one student per attack (of ``attacks``, default :data:`ATTACKS`) into ``out``; return
    {student: expected ex01 score or None (= 0)}."""
    learner = nbformat.read(os.path.join(ROOT, "exercises", "ex01_collectives.ipynb"), as_version=4)
    answer = next(
        i for i, c in enumerate(learner.cells) if 'raise NotImplementedError("Exercise' in c.source
    )
    students = {}
    for name, source in (ATTACKS if attacks is None else attacks).items():
        for wrong in (False, True) if name in WRONG_LOOKS_RIGHT else (False,):
            nb = nbformat.from_dict(learner)
            nb = nbformat.reads(nbformat.writes(learner), as_version=4)
            if wrong:
                nb.cells[answer].source = bob_ex01
            cell = nbformat.v4.new_code_cell(source)
            cell.id = f"attack-{name}"
            nb.cells.insert(0, cell)
            student = f"{name}{'_wrong' if wrong else ''}"
            os.makedirs(os.path.join(out, student))
            nbformat.write(nb, os.path.join(out, student, "ex01_collectives.ipynb"))
            students[student] = wrong
    return students
