"""JUnit XML (counts, failures, errors) and the HTML report rendered in real headless Chromium."""

import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib

import pytest

from detrun.judge.claims import AXIS_NAMES
from detrun.judge.compare import compare_runs
from detrun.judge.findings import collapse, judge
from detrun.present.junit import junit_xml
from detrun.present.report import COLOURS, build_report
from tests.helpers import TINY, drop_row, flip_one_ulp, is_alone_target, run_inline, small, terminal_text

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _cases(xml_text):
    root = ET.fromstring(xml_text)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    return root, suite, suite.findall("testcase")


def test_junit_counts_every_comparison_claim_and_finding_once(store):
    run_inline(store, small(reference={"variant": "split_kv", "kv_tile": 4}), "run")
    flip_one_ulp(store, "run", is_alone_target)
    gone = drop_row(store, "run", lambda r: r["key"] == "mixed/long/eager/r1/g0")
    cmp = compare_runs(store, ["run"])
    root, suite, cases = _cases(junit_xml(judge(cmp), "nightly"))
    pairs = collapse(cmp.verdicts)
    others = [f for f in judge(cmp).findings if f.kind not in ("differs", "explained", "broken_claim")]
    axes = len(AXIS_NAMES)
    assert len(cases) == axes + axes * len(pairs) + len(others) == int(suite.get("tests")) == int(root.get("tests"))
    failures = [c for c in cases if c.find("failure") is not None]
    assert len(failures) == int(suite.get("failures")) == int(root.get("failures")) == 3
    assert {(c.get("classname"), c.get("name")) for c in failures} == {
        ("detrun.claim", "repeat explained"), ("detrun.repeat", "target"),
        ("detrun.missing", f"missing cell run:{gone['key']}: no row was stored")}
    repeat = next(c for c in failures if c.get("classname") == "detrun.repeat").find("failure").text
    assert "max ULP 1" in repeat and "unexplained" in repeat
    skipped = [c for c in cases if c.find("skipped") is not None]
    n_a = sum(cells[a].status == "n/a" for cells in pairs.values() for a in cells)
    # n/a comparisons, the claims nothing was compared along (gpu, mode, phase, run, version) or ignored (backend),
    # the cells skipped on CPU
    assert len(skipped) == int(suite.get("skipped")) == n_a + 6 + 1
    assert "cudagraph mode needs a CUDA device" in skipped[-1].find("skipped").text
    strict = _cases(junit_xml(judge(compare_runs(store, ["run"], strict=True))))[1]
    assert int(strict.get("failures")) > 3  # explained differences fail when strict


def _heatmap(html):
    """(request, axis) -> (data-status, fill, tooltip) of each heatmap cell."""
    cells = re.findall(r'<rect class="cell" data-status="([^"]+)"[^>]* fill="([^"]+)"><title>([^<]+)</title>', html)
    return {tuple(tip.split(":")[0].split(" / ")): (status, fill, tip) for status, fill, tip in cells}


def _table_row(text, request):
    return next(line for line in text.splitlines() if line.startswith(f"│ {request} "))


def test_a_difference_that_breaks_a_claim_is_red_and_says_so_everywhere(store):
    split = dict(reference={"variant": "split_kv", "kv_tile": 4}, repeats=1, modes=["eager"])
    run_inline(store, small(expect={"batch": "bitwise"}, **split), "bitwise")
    verdict = judge(compare_runs(store, ["bitwise"]))
    assert verdict.exit_code == 1
    cell = verdict.cells["target"]["batch"]
    assert (cell.state, cell.text) == ("breaks", "breaks bitwise 1/1")
    assert "breaks bitwise 1/1" in _table_row(terminal_text(verdict), "target")
    html = build_report(verdict)
    status, fill, tip = _heatmap(html)[("target", "batch")]
    assert (status, fill) == ("breaks", COLOURS["breaks"]) and tip.startswith("target / batch: breaks bitwise 1/1")
    summary = re.search(r"<p id='summary'>([^<]+)</p>", html).group(1)
    assert "request x axis: 2 breaks bitwise, " in summary  # target and target_p
    # the same difference, not claimed bitwise: explained, yellow; equal is green and not compared grey
    run_inline(store, small(**dict(split, repeats=2)), "explained")
    verdict = judge(compare_runs(store, ["explained"]))
    assert verdict.exit_code == 0 and verdict.cells["target"]["batch"].text == "explained 2/2"
    heat = _heatmap(build_report(verdict))
    assert heat[("target", "batch")][:2] == ("explained", COLOURS["explained"]) == ("explained", "#f0b400")
    assert heat[("long", "batch")][:2] == ("n/a", COLOURS["n/a"]) and heat[("target", "repeat")][:2] == (
        "equal", COLOURS["equal"])
    assert "breaks" not in _table_row(terminal_text(verdict), "target")


def test_junit_error_rows_are_errors(store):
    run_inline(store, small(**TINY), "run")
    cmp = compare_runs(store, ["run"])
    cmp.errors.append(("run:alone/target/eager/r0/g0", "RuntimeError: boom"))
    root, suite, cases = _cases(junit_xml(judge(cmp)))
    assert int(suite.get("errors")) == 1 == len([c for c in cases if c.find("error") is not None])
    assert int(suite.get("failures")) == 0


def _png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB/RGBA PNG, decoded with zlib only."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and colour in (2, 6)
    bpp, raw, rows, prev = 3 if colour == 2 else 4, zlib.decompress(idat), [], None
    stride = width * bpp
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        prev = prev or bytearray(stride)
        for i in range(stride):
            a, b = line[i - bpp] if i >= bpp else 0, prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def _count_colour(png, hex_colour, tol=8):
    width, height, bpp, rows = png
    want = bytes.fromhex(hex_colour[1:])
    return sum(all(abs(line[x + k] - want[k]) <= tol for k in range(3))
               for line in rows for x in range(0, width * bpp, bpp))


def _chromium(tmp_path, html, *args):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900", *args, html.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
def test_report_renders_in_chromium(store, tmp_path):
    run_inline(store, small(reference={"variant": "split_kv", "kv_tile": 4}), "run")
    flip_one_ulp(store, "run", is_alone_target)
    cmp = compare_runs(store, ["run"])
    html = tmp_path / "report.html"
    html.write_text(build_report(judge(cmp), "nightly"))
    text = html.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "<script" not in text
    dom = _chromium(tmp_path, html, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    assert '<svg id="heatmap"' in rendered and '<svg id="ulp-plot"' in rendered
    cells = len(collapse(cmp.verdicts)) * len(AXIS_NAMES)
    assert rendered.count('class="cell"') == cells
    assert rendered.count('data-status="breaks"') == 1 and 'data-status="explained"' in rendered
    assert "DETERMINISM FAILURE" in rendered and "explained by plan: kv_chunk_size" in rendered
    png = tmp_path / "shot.png"
    shot = _chromium(tmp_path, html, f"--screenshot={png}")
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    pixels = _png_pixels(png)
    assert pixels[:2] == (1200, 900)
    white = _count_colour(pixels, "#ffffff", tol=2)
    assert white < 1200 * 900 * 0.97  # not a blank page
    cell_px = 88 * 20  # one heatmap cell
    assert _count_colour(pixels, COLOURS["breaks"]) > cell_px  # the verdict banner and the red cell
    assert _count_colour(pixels, COLOURS["equal"]) > cell_px
    assert _count_colour(pixels, COLOURS["explained"]) > cell_px
    assert _count_colour(pixels, COLOURS["n/a"]) > 10 * cell_px
