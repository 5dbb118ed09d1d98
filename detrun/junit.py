"""JUnit XML of a Comparison: one testcase per (request, axis) comparison, per missing cell, per error."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Dict, List, Tuple

from .compare import Comparison, Mismatch
from .paths import write_output

_COUNTS = ("tests", "failures", "errors", "skipped")


def mismatch_text(m: Mismatch) -> str:
    """One mismatch as lines of text: what met what, the diff numbers, why."""
    lines = [f"{m.label} across {m.axis}: {m.a} vs {m.b}"]
    lines += [f"  {name}: {stats}" for name, stats in (("out", m.out), ("lse", m.lse)) if stats is not None]
    lines.append(f"  why: {'; '.join(m.why)}")
    return "\n".join(lines)


class _Suite:
    def __init__(self, name: str):
        self.el = ET.Element("testsuite", name=name, time="0")
        self.counts = dict.fromkeys(_COUNTS, 0)

    def case(self, classname: str, name: str, kind: str = "", message: str = "", text: str = "") -> None:
        tc = ET.SubElement(self.el, "testcase", classname=classname, name=name, time="0")
        self.counts["tests"] += 1
        if kind == "system-out":
            ET.SubElement(tc, kind).text = text or message
        elif kind:
            child = ET.SubElement(tc, kind, message=message)
            if kind != "skipped":
                child.set("type", kind)
                child.text = text or message
            self.counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[kind]] += 1


def junit_xml(cmp: Comparison, name: str = "detrun") -> str:
    suite = _Suite(name)
    if cmp.baseline_context:
        props = ET.SubElement(suite.el, "properties")
        for i, line in enumerate(cmp.baseline_context):
            ET.SubElement(props, "property", name=f"baseline.{i}", value=line)
    details: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    for m in cmp.mismatches:
        details[(m.request, m.axis)].append(mismatch_text(m))
    for v in cmp.verdicts:
        text = "\n".join(details[(v.request, v.axis)])
        cls = f"detrun.{v.axis}"
        if v.status == "n/a":
            suite.case(cls, v.request, "skipped", f"nothing varies along {v.axis}")
        elif v.status == "differs":
            suite.case(cls, v.request, "failure", f"{v.differing_groups}/{v.groups} groups differ, unexplained", text)
        elif v.status == "explained":
            msg = f"{v.explained_groups}/{v.groups} groups differ, explained by plan or environment"
            suite.case(cls, v.request, "failure" if cmp.strict else "system-out", msg, text)
        else:
            suite.case(cls, v.request, "system-out", f"{v.rows} rows in {v.groups} groups bitwise equal")
    for key in cmp.missing:
        suite.case("detrun.missing", key, "failure", "missing cell: no row was stored")
    for key in cmp.duplicates:
        suite.case("detrun.duplicate", key, "failure", "duplicate rows for one cell")
    for key, reason in cmp.errors:
        suite.case("detrun.error", key, "error", reason or "error")
    root = ET.Element("testsuites", name=name)
    for k, v in suite.counts.items():
        suite.el.set(k, str(v))
        if k != "skipped":
            root.set(k, str(v))
    root.append(suite.el)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(cmp: Comparison, path: str, name: str = "detrun", option: str = "--junit") -> None:
    """Write the JUnit XML; a failed write is a DetrunError naming option."""
    write_output(path, junit_xml(cmp, name), option)
