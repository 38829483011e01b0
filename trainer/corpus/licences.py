"""Which licence a source file is under, and whether it is permissive enough to train on and ship.

The answer comes from the most specific evidence there is: a file's own `SPDX-License-Identifier` line, else its
package's `License-Expression`, licence classifiers or `License` field, else the text of the package's licence file.
Only licences that allow use, modification and redistribution without copyleft count as permissive; anything
unknown is not.
"""

from __future__ import annotations

import re

# SPDX identifiers (and the Python ecosystem's spellings of them) that are permissive.
PERMISSIVE = {
    "MIT": "MIT", "MIT-0": "MIT-0", "BSD": "BSD", "BSD-2-CLAUSE": "BSD-2-Clause", "BSD-3-CLAUSE": "BSD-3-Clause",
    "BSD-3-CLAUSE-CLEAR": "BSD-3-Clause-Clear", "APACHE-2.0": "Apache-2.0", "APACHE 2.0": "Apache-2.0",
    "APACHE": "Apache-2.0", "APACHE LICENSE 2.0": "Apache-2.0", "APACHE SOFTWARE LICENSE": "Apache-2.0",
    "PSF-2.0": "PSF-2.0", "PYTHON-2.0": "Python-2.0", "ISC": "ISC", "ZLIB": "Zlib", "UNLICENSE": "Unlicense",
    "CC0-1.0": "CC0-1.0", "BSL-1.0": "BSL-1.0", "NCSA": "NCSA", "HPND": "HPND", "0BSD": "0BSD",
}
# Trove classifiers ("License :: OSI Approved :: X") mapped to an identifier above.
CLASSIFIERS = {
    "MIT License": "MIT", "BSD License": "BSD", "Apache Software License": "Apache-2.0",
    "Python Software Foundation License": "PSF-2.0", "ISC License (ISCL)": "ISC", "zlib/libpng License": "Zlib",
    "The Unlicense (Unlicense)": "Unlicense", "Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "University of Illinois/NCSA Open Source License": "NCSA", "Historical Permission Notice and Disclaimer (HPND)":
    "HPND", "CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0", "MIT No Attribution License (MIT-0)":
    "MIT-0",
}
# Phrases that identify a licence text (the first few kilobytes of a LICENSE file).
TEXT_MARKERS = (
    ("Apache License", "Apache-2.0"),
    ("Permission is hereby granted, free of charge", "MIT"),
    ("Redistribution and use in source and binary forms", "BSD"),
    ("Permission to use, copy, modify, and/or distribute this software", "ISC"),
    ("Boost Software License", "BSL-1.0"),
)
_SPDX_LINE = re.compile(r"SPDX-License-Identifier:\s*([^\n*]+?)\s*(?:\*/|-->|$)", re.M)


def spdx_of_file(text: str) -> str | None:
    """The expression of a `SPDX-License-Identifier:` line near the top of a source file, if it has one."""
    match = _SPDX_LINE.search(text[:4096])
    return match.group(1).strip() if match else None


def permissive_expression(expression: str) -> bool:
    """Whether an SPDX-style expression allows training on and redistributing the file: `A OR B` when either
    side is permissive, `A AND B` when both are; `X WITH exception` as X (the exceptions in use only relax it)."""
    expression = expression.strip().strip("()")
    if not expression:
        return False
    parts = re.split(r"\s+OR\s+", expression, flags=re.I)
    if len(parts) > 1:
        return any(permissive_expression(p) for p in parts)
    parts = re.split(r"\s+AND\s+", expression, flags=re.I)
    if len(parts) > 1:
        return all(permissive_expression(p) for p in parts)
    base = re.split(r"\s+WITH\s+", expression, flags=re.I)[0].strip().strip("()").upper()
    return base in PERMISSIVE


def package_licence(metadata, licence_text: str = "") -> str | None:
    """The licence of a package from its core metadata (an `email.message.Message`-like mapping with `get` and
    `get_all`, as importlib.metadata and PKG-INFO give) and, failing that, its licence file's text."""
    expression = (metadata.get("License-Expression") or "").strip()
    if expression:
        return expression
    for classifier in metadata.get_all("Classifier") or []:
        if classifier.startswith("License ::"):
            name = classifier.split("::")[-1].strip()
            if name in CLASSIFIERS:
                return CLASSIFIERS[name]
    field = (metadata.get("License") or "").strip()
    # The License field is free text: short values are names ("BSD-3-Clause", "Apache 2.0"); long ones are whole
    # licence texts, recognised by their phrases below.
    if field and "\n" not in field and len(field) < 60 and field.upper() in PERMISSIVE:
        return PERMISSIVE[field.upper()]
    for text in (field, licence_text):
        for phrase, name in TEXT_MARKERS:
            if phrase in text[:8192]:
                return name
    return field or None
