#!/usr/bin/env python3
"""Copy the compat matrix the last compat test run wrote (.deps/compat-matrix.md) into
README.md between the <!-- compat-matrix --> markers."""
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
table = (root / ".deps" / "compat-matrix.md").read_text()
readme = root / "README.md"
text = readme.read_text()
new, n = re.subn(r"(<!-- compat-matrix -->\n).*?(<!-- /compat-matrix -->)",
                 lambda m: m.group(1) + table + m.group(2), text, flags=re.S)
if n != 1:
    sys.exit("README.md has no <!-- compat-matrix --> ... <!-- /compat-matrix --> block")
readme.write_text(new)
print(table)
