"""Every ```python block in an implemented paper's README runs."""
import re

import pytest

from iclr26 import registry

BLOCK = re.compile(r"```python\n(.*?)```", re.S)
CASES = [(p.id, i, code) for p in registry.implemented()
         for i, code in enumerate(BLOCK.findall((p.folder / "README.md").read_text()))]


@pytest.mark.parametrize("pid,i,code", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_readme_snippet_runs(pid, i, code):
    exec(compile(code, f"{pid}/README.md#{i}", "exec"), {"__name__": "__readme__"})
