"""The conversion sheet (book/conversion_sheet.md) shows real code: its Python cells parse; every
name it takes from Horovod, TensorFlow or PyTorch (``hvd.DistributedOptimizer``,
``tf.config.set_visible_devices``, ``dist.all_reduce`` ...) exists in the installed versions and
every keyword it passes is one the function accepts; each Horovod column imports its own ``hvd``
module; and each launch command is one the course's trainers document.

The names are looked up in a subprocess that imports the modules (``horovod.tensorflow.keras``,
``horovod.torch``, ``torch.distributed``) and never calls ``hvd.init()``: no rank is started.
Lines that the sheet takes unchanged from the trainers are checked the same way."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

SHEET = os.path.join(ROOT, "book", "conversion_sheet.md")
COLUMNS = ("Keras + Horovod", "PyTorch + Horovod", "PyTorch DDP")
ROWS = (
    "Import, initialise",
    "Pin the device",
    "Shard the data",
    "Scale the learning rate",
    "Wrap the optimizer",
    "Broadcast the initial state",
    "Average the metrics",
    "Rank 0 alone writes",
    "Launch",
)
TRAINER = {
    "Keras + Horovod": "train_hvd.py",
    "PyTorch + Horovod": "train_torch_hvd.py",
    "PyTorch DDP": "train_torch_ddp.py",
}
HVD_MODULE = {"Keras + Horovod": "horovod.tensorflow.keras", "PyTorch + Horovod": "horovod.torch"}
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def sheet_table() -> list:
    """The sheet's list-table as rows of cells (each cell: its Markdown, dedented)."""
    text = open(SHEET).read()
    body = text.split("````{list-table}", 1)[1].split("\n````", 1)[0]
    rows = []
    for block in re.split(r"^\* ", body, flags=re.M)[1:]:
        cells = re.split(r"^(?:  )?- ", block, flags=re.M)[1:]
        rows.append([textwrap.dedent("    " + cell).strip("\n") for cell in cells])
    return rows


def cells(column: str) -> dict:
    """{row name: [(language, code), ...]} of one column."""
    header, *rows = sheet_table()
    index = header.index(column)
    found = {}
    for row in rows:
        name = re.sub(r"\*\*(.*?)\*\*.*", r"\1", row[0].splitlines()[0]).strip()
        found[name] = [
            (lang, textwrap.dedent(code)) for lang, code in FENCE.findall(row[index] + "\n")
        ]
    return found


def python_of(column: str) -> list:
    return [code for blocks in cells(column).values() for lang, code in blocks if lang == "python"]


def imports_and_uses(column: str):
    """The column's import statements, the dotted names it uses from them, and its calls' keywords."""
    trees = [ast.parse(code) for code in python_of(column)]
    imports, roots = [], set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append(ast.unparse(node))
                roots.update((alias.asname or alias.name).split(".")[0] for alias in node.names)

    def dotted(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in roots:
            return ".".join([node.id, *reversed(parts)])
        return None

    names, calls = set(), set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Attribute, ast.Name)) and dotted(node):
                names.add(dotted(node))
            if isinstance(node, ast.Call) and dotted(node.func):
                keywords = tuple(sorted(k.arg for k in node.keywords if k.arg))
                calls.add((dotted(node.func), keywords))
    return imports, sorted(names), sorted(calls)


LOOKUP = r"""
import inspect, json, sys
request = json.load(sys.stdin)
space = {}
for line in request["imports"]:
    exec(line, space)
def find(name):
    root, *rest = name.split(".")
    obj = space[root]
    for part in rest:
        obj = getattr(obj, part)
    return obj
missing, refused = [], []
for name in request["names"]:
    try:
        find(name)
    except (KeyError, AttributeError):
        missing.append(name)
for name, keywords in request["calls"]:
    try:
        signature = inspect.signature(find(name))
    except (KeyError, AttributeError, TypeError, ValueError):
        continue  # missing: reported above; builtins without a signature: not checked
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        continue
    accepted = {p.name for p in params}
    refused += [f"{name}({k}=...)" for k in keywords if k not in accepted]
print(json.dumps({"missing": missing, "refused": refused}))
"""


@functools.lru_cache(maxsize=None)
def looked_up(column: str) -> dict:
    imports, names, calls = imports_and_uses(column)
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run(
        [sys.executable, "-c", LOOKUP],
        input=json.dumps({"imports": imports, "names": names, "calls": calls}),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert run.returncode == 0, f"importing the {column} column's modules failed:\n{run.stderr}"
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_sheet_has_three_columns_side_by_side_and_one_row_per_step():
    header, *rows = sheet_table()
    assert header[1:] == list(COLUMNS)
    assert [re.sub(r"\*\*(.*?)\*\*.*", r"\1", row[0].splitlines()[0]) for row in rows] == list(ROWS)
    assert all(len(row) == 4 for row in rows)


@pytest.mark.parametrize("column", sorted(HVD_MODULE))
def test_each_horovod_column_imports_its_own_hvd_module(column):
    first = "\n".join(code for _, code in cells(column)["Import, initialise"])
    assert f"import {HVD_MODULE[column]} as hvd" in first
    others = set(HVD_MODULE.values()) - {HVD_MODULE[column]}
    assert not any(other in "\n".join(python_of(column)) for other in others)


@pytest.mark.parametrize("column", COLUMNS)
def test_every_python_cell_parses(column):
    for code in python_of(column):
        ast.parse(code)


@pytest.mark.parametrize("column", COLUMNS)
def test_every_name_the_sheet_uses_exists_in_the_installed_modules(column):
    assert looked_up(column)["missing"] == []


@pytest.mark.parametrize("column", COLUMNS)
def test_every_keyword_the_sheet_passes_is_accepted(column):
    assert looked_up(column)["refused"] == []


@pytest.mark.parametrize("column", COLUMNS)
def test_the_sheet_uses_the_trainers_distributed_calls(column):
    """The calls that make a trainer distributed (``hvd.*``, ``dist.*``, the wrappers) are the ones
    the course's trainer makes: the sheet adds none the trainer does not run."""
    source = open(os.path.join(ROOT, "hvdcourse", "examples", TRAINER[column])).read()
    _, names, _ = imports_and_uses(column)
    distributed = [
        n
        for n in names
        if n.startswith(("hvd.", "dist.")) or n in ("DistributedSampler", "DistributedDataParallel")
    ]
    assert distributed
    assert [n for n in distributed if n.split(".", 1)[-1] not in source] == []


@pytest.mark.parametrize("column", COLUMNS)
def test_every_launch_command_is_one_the_trainer_documents(column):
    source = open(os.path.join(ROOT, "hvdcourse", "examples", TRAINER[column])).read()
    lines = [
        line.split("#")[0].strip()
        for lang, code in cells(column)["Launch"]
        if lang == "bash"
        for line in code.splitlines()
        if line.strip()
    ]
    assert lines
    assert [line for line in lines if line not in source] == []
