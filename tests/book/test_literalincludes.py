"""Every literalinclude of the lessons finds what it names (a file, its :pyobject:, its :start-at: /
:end-at: / :start-after: / :end-before: text) in the code as it is now, without building the book:
a moved or reformatted line shows up here in a second, not after a 15-minute build."""

import glob
import os
import re

from conftest import ROOT

INCLUDE = re.compile(r"```\{literalinclude\}\s+(\S+)\n(.*?)```", re.S)
OPTION = re.compile(r":(start-at|end-at|start-after|end-before|pyobject):\s*(.*)")


def missing_targets() -> list:
    found = []
    pages = glob.glob(os.path.join(ROOT, "notebooks", "*.md")) + glob.glob(
        os.path.join(ROOT, "book", "*.md")
    )
    for page in sorted(pages):
        for include in INCLUDE.finditer(open(page).read()):
            path = os.path.normpath(os.path.join(os.path.dirname(page), include.group(1)))
            where = f"{os.path.relpath(page, ROOT)} -> {os.path.relpath(path, ROOT)}"
            if not os.path.isfile(path):
                found.append(f"{where}: no such file")
                continue
            source = open(path).read()
            for option, value in OPTION.findall(include.group(2)):
                value = value.strip().strip('"')
                if option == "pyobject":
                    name = re.escape(value.split(".")[-1])
                    if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", source, re.M):
                        found.append(f"{where}: no def or class {value}")
                elif value not in source:
                    found.append(f"{where}: :{option}: {value!r} is not in the file")
    return found


def test_every_literalinclude_finds_its_file_object_and_markers():
    assert missing_targets() == []
