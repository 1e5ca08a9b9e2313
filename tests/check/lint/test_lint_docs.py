"""The README and the book's next-steps page show hvdcourse-lint on an example script, with the
lines the command prints for it today (the two pages are not executed: this keeps them true)."""

import os
import re

import pytest

from conftest import ROOT
from hvdcourse.course.check.lint import lint

# each page, and the heading of its section about the tool
DOCS = {
    "README.md": "### Check a training script",
    "book/next_steps.md": "## Check your own script",
}


def example(doc: str) -> tuple:
    """The page's example script and the output it shows for ``hvdcourse-lint my_train.py``."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as fh:
        text = fh.read()
    section = text[text.index(DOCS[doc]) :]
    script = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(
        r"```console\n\$ hvdcourse-lint my_train.py\n(.*?)(?:^\$ |^```)", section, re.S | re.M
    )
    return script, shown.group(1)


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_example_output_on_the_page_is_what_the_command_prints(
    doc, tmp_path, monkeypatch, capsys
):
    script, shown = example(doc)
    (tmp_path / "my_train.py").write_text(script)
    monkeypatch.chdir(tmp_path)
    assert lint.main(["my_train.py"]) == 1
    assert capsys.readouterr().out == shown


def test_the_readme_and_the_next_steps_page_show_the_same_example():
    assert example("README.md") == example("book/next_steps.md")
