"""JUnit XML of a Verdict (judge/verdict.py): claims, (request, axis) comparisons, every other finding."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..judge.claims import AXIS_NAMES
from ..judge.verdict import FAIL, INFO, WARN, Verdict
from ..paths import write_output

_COUNTS = ("tests", "failures", "errors", "skipped")


class _Suite:
    def __init__(self, name: str):
        self.el = ET.Element("testsuite", name=name, time="0")
        self.counts = dict.fromkeys(_COUNTS, 0)

    def case(self, classname: str, name: str, kind: str = "", message: str = "", text: str = "") -> None:
        tc = ET.SubElement(self.el, "testcase", classname=classname, name=name, time="0")
        self.counts["tests"] += 1
        if kind == "system-out":
            ET.SubElement(tc, kind).text = "\n".join(t for t in (message, text) if t)
        elif kind:
            child = ET.SubElement(tc, kind, message=message)
            if kind != "skipped":
                child.set("type", kind)
            child.text = text or message
            self.counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[kind]] += 1


_KIND = {FAIL: "failure", WARN: "skipped", INFO: "system-out"}


def junit_xml(verdict: Verdict, name: str = "detrun") -> str:
    """One testcase per claim (axis), per (request, axis) comparison, and per other finding."""
    suite = _Suite(name)
    props = ET.SubElement(suite.el, "properties")
    ET.SubElement(props, "property", name="verdict", value=verdict.headline)
    ET.SubElement(props, "property", name="claims", value=verdict.describe_claims())
    for i, line in enumerate(verdict.baseline.lines):
        ET.SubElement(props, "property", name=f"baseline.{i}", value=line)
    for i, prov in enumerate(verdict.of("provisional_baseline")):
        ET.SubElement(props, "property", name=f"provisional.{i}", value=prov.title)
    claim_findings = {f.axis: f for f in verdict.of("broken_claim") + verdict.of("unverified_claim")}
    for c in verdict.claims:
        f = claim_findings.get(c.axis)
        if f is not None:
            suite.case("detrun.claim", f"{c.axis} {c.level}", _KIND[f.severity], f.title)
        elif c.status in ("not compared", "ignored"):
            suite.case("detrun.claim", f"{c.axis} {c.level}", "skipped", f"{c.axis}: {c.status}")
        else:
            suite.case("detrun.claim", f"{c.axis} {c.level}", "system-out", c.text)
    per_request = {(f.request, f.axis): f for f in verdict.findings if f.kind in ("differs", "explained")}
    for request, cells in verdict.cells.items():
        for axis in AXIS_NAMES:
            v, f = cells[axis].verdict, per_request.get((request, axis))
            cls = f"detrun.{axis}"
            if f is not None:
                suite.case(cls, request, _KIND[f.severity], f.title, f.detail)
            elif v.status == "n/a":
                suite.case(cls, request, "skipped", f"nothing varies along {axis}")
            else:
                suite.case(cls, request, "system-out", f"{v.rows} rows in {v.groups} groups bitwise equal")
    done = {"broken_claim", "unverified_claim", "differs", "explained"}
    for f in verdict.findings:
        if f.kind not in done:
            kind = "error" if f.kind == "error" else "system-out" if f.tag == "a warning" else _KIND[f.severity]
            text = "\n".join([f.title, *f.items[:50], f.detail]).strip()
            suite.case(f"detrun.{f.kind}", f.title, kind, f.title, text)
    root = ET.Element("testsuites", name=name)
    for k, count in suite.counts.items():
        suite.el.set(k, str(count))
        if k != "skipped":
            root.set(k, str(count))
    root.append(suite.el)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(verdict: Verdict, path: str, name: str = "detrun", option: str = "--junit") -> None:
    """Write the JUnit XML; a failed write is a DetrunError naming option."""
    write_output(path, junit_xml(verdict, name), option)
