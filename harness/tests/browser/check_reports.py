#!/usr/bin/env python3
"""The HTML reports in a real browser.

rlharness makes the five kinds of HTML report with mock scenarios (a passing run, a failing run, a
multi-seed run, the combined index of an invocation, a knob propagation matrix), then headless
Chromium (Playwright for Python driving Debian's /usr/bin/chromium) opens each one and checks:

- the verdict is at the top: in the first screen, before any table or plot;
- a run's failing rules are named above the rules table and the plots;
- every plot has rendered, with a data series drawn (not only bands): the run and the golden, or
  for a multi-seed run every seed, the golden and the seeds' window means;
- every plot reads at a glance: its legend overlaps no data series, the y axis is labelled with
  the metric, the tick labels of each axis differ from one another (small values too), a
  windowed rule's judged window value is drawn, and a failing rule's points are marked;
- the page logs no console error, and no request fails;
- no number wraps inside a table cell (the folded tables opened too), and the page does not
  scroll sideways;
- no status mark needs an emoji font (no emoji in the page's text).

Each problem is printed as `report KIND (PATH): PROBLEM`; any problem fails the script (exit 1).
Screenshots (the whole page, and each plot) go to `screenshots/` beside each report.

The checks are checked too: broken copies of the reports (an emoji, a console error, a missing
image, the verdict at the bottom, no failing line, plots of bands only, no window values, no
failing marks, the legend over the data, no y-axis label, repeated ticks, numbers that wrap, a
page wider than the window), each of which its check must catch; one that passes fails the
script.

Usage: python3 harness/tests/browser/check_reports.py [--bin PATH] [--out DIR]
Needs Playwright for Python on PYTHONPATH (ci/browser-install.sh installs it into .browserdeps/)
and /usr/bin/chromium; ci/browser-tests.sh runs it.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SMOKE = "scenarios/smoke/mock-gsm8k-grpo.yaml"
SELFTEST = "scenarios/selftest/mock-mfu-drop.yaml"
# A failing run: the mock's reward 0.1 lower (fails the windowed reward band) and its compute
# 10% slower (fails the per-step MFU band).
FAILING_SET = ["backend.reward.offset=-0.1", "backend.efficiency.scale=0.9"]
# The multi-seed run's rule: the reward's window means against a calibrated band.
SEEDS_CHECKS = "checks.golden={critic/rewards/mean: {window: 5, calibrated: {k: 4, floor: 0.02}}}"
SEEDS = (11, 13)
CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium's own connection attempts fail (and log) on a
# closed network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Narrow enough that long cells wrap, as on a laptop beside an editor.
VIEWPORT = {"width": 1024, "height": 800}
# The series names the plots use (harness/src/report/plots/mod.rs).
RUN, GOLDEN, WINDOW, FAILING = "run", "golden", "window value (judged)", "failing"
SEEDS_WINDOW = "seeds' window mean"


class SetupError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Making the reports.


def rlharness(binary, args, ok_codes, env=None):
    """Run rlharness from the repository root; its stdout, or SetupError with its output."""
    cmd = [str(binary), *args]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    if p.returncode not in ok_codes:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-15:])
        raise SetupError(
            f"`rlharness {' '.join(args)}` exited {p.returncode} (expected {sorted(ok_codes)}):\n"
            f"{tail}"
        )
    return p.stdout


def report_dir(stdout):
    """The run directory a `run` printed (`  report: DIR/report.md`)."""
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("report: "):
            return Path(line[len("report: "):]).parent.resolve()
    raise SetupError(f"no `report:` line in rlharness's output:\n{stdout}")


def make_reports(binary, out):
    """Each kind of report: (kind, report.html, what the checks need to know of it)."""
    reports = []

    def add(kind, make):
        try:
            reports.append((kind, *make()))
        except (SetupError, subprocess.TimeoutExpired, OSError) as e:
            reports.append((kind, None, {"error": str(e)}))

    def single():
        d = report_dir(rlharness(binary, ["run", SMOKE, "--out", str(out / "single")], {0}))
        return d / "report.html", {"run_dir": d}

    def failing():
        args = ["run", SMOKE, "--out", str(out / "failing")]
        for s in FAILING_SET:
            args += ["--set", s]
        d = report_dir(rlharness(binary, args, {1}))
        return d / "report.html", {"run_dir": d}

    def multi_seed():
        # A golden of the smoke with a calibration of four seeds, in a store of its own.
        golden = out / "golden"
        src, dst = ROOT / "golden/mock-gsm8k-grpo/cpu", golden / "mock-gsm8k-grpo/cpu"
        dst.mkdir(parents=True)
        shutil.copy(src / "metrics.csv", dst / "metrics.csv")
        # The golden's recorded rules left out: the calibrated band is not a loosened one.
        yaml = (src / "golden.yaml").read_text()
        (dst / "golden.yaml").write_text(
            "".join(l for l in yaml.splitlines(keepends=True) if not l.startswith("rules:"))
        )
        common = ["--golden", str(golden), "--set", SEEDS_CHECKS, "--jobs", "2"]
        # `golden calibrate` refuses under CI=true (CI never writes goldens); this one writes a
        # throwaway store under the test's own directory, so it runs as a local user's would.
        local = {k: v for k, v in os.environ.items() if k != "CI"}
        rlharness(
            binary,
            ["golden", "calibrate", "--allow-dirty", "--seeds", "1..4",
             "--out", str(out / "calibration"), *common, SMOKE],
            {0},
            env=local,
        )
        d = report_dir(rlharness(
            binary,
            ["run", SMOKE, "--seeds", f"{SEEDS[0]}..{SEEDS[1]}", "--out", str(out / "multi-seed"),
             *common],
            {0},
        ))
        return d / "report.html", {"run_dir": d}

    def index():
        o = out / "index"
        rlharness(binary, ["run", SMOKE, SELFTEST, "--out", str(o)], {0})
        first = (o / "index.md").read_text().splitlines()[0]
        return o / "index.html", {"verdict": first.lstrip("# ").strip()}

    def propagation():
        o = out / "propagation"
        stdout = rlharness(
            binary, ["propagate", SMOKE, "--until", "initialize", "--out", str(o)], {0}
        )
        # Only `propagate`'s exit 0 is a pass: `--until initialize` judges the smoke's knobs
        # with no new flag.
        d = report_dir(stdout)
        # The summary: the paragraph after the heading of propagation.md.
        paras = [p for p in (d / "propagation.md").read_text().split("\n\n") if p.strip()]
        return d / "propagation.html", {"verdict": paras[1].strip()}

    add("single run", single)
    add("failing run", failing)
    add("multi-seed", multi_seed)
    add("combined index", index)
    add("propagation", propagation)
    return reports


# ---------------------------------------------------------------------------------------------
# What the page shows, read in the browser.

# The element that first shows `text` (its text, whitespace collapsed), where it is and whether it
# comes before every table and plot.
FIND_TOP_JS = """(text) => {
  const norm = (s) => s.replace(/\\s+/g, ' ').trim();
  const blocks = document.body.querySelectorAll('h1,h2,h3,p,li,div,td,th,summary,figcaption');
  let el = null;
  for (const b of blocks) { if (norm(b.textContent).includes(text)) { el = b; break; } }
  if (!el) return null;
  const first = document.querySelector('table, figure, svg:not(.mark)');
  const before = !first || !!(el.compareDocumentPosition(first) & Node.DOCUMENT_POSITION_FOLLOWING);
  return {top: el.getBoundingClientRect().top, before, tag: el.tagName.toLowerCase()};
}"""

# Each number that wraps inside a table cell (a token split over two lines).
WRAPS_JS = """() => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  const re = /(?<![\\w.])[-+]?(?:\\d+\\.\\.\\d+|\\d+(?:\\.\\d+)?(?:e[-+]?\\d+)?)(?![\\w.])/g;
  const out = [];
  for (const cell of document.querySelectorAll('td, th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (const m of n.data.matchAll(re)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter((x) => x.width > 0)
          .map((x) => Math.round(x.top)));
        if (tops.size > 1) out.push({number: m[0], cell: cell.textContent.trim().slice(0, 80)});
      }
    }
  }
  return out;
}"""

EMOJI_JS = """() => [...new Set(document.body.innerText.match(/\\p{Extended_Pictographic}|\\uFE0F/gu)
  || [])]"""

# Each plot (an <svg> in a <figure>): its metric, size, series, legend, texts.
PLOTS_JS = """() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {x: r.left, y: r.top, w: r.width, h: r.height}; };
  const marks = (g) => {
    let n = 0;
    for (const p of g.querySelectorAll('polyline')) {
      if ((p.getAttribute('points') || '').trim().split(/\\s+/).length >= 2) n++; }
    n += g.querySelectorAll('circle, line, path').length;
    return n;
  };
  return [...document.querySelectorAll('figure')].filter((f) => f.querySelector('svg'))
    .map((f) => {
      const svg = f.querySelector('svg');
      const cap = f.querySelector('figcaption');
      return {
        metric: f.dataset.metric || (cap ? cap.textContent.trim() : ''),
        box: box(svg),
        series: [...svg.querySelectorAll('g.series')].map((g) => ({
          name: g.dataset.series, marks: marks(g), box: box(g)})),
        legend: [...svg.querySelectorAll('g.legend')].map(box),
        texts: [...svg.querySelectorAll('text')].filter((t) => !t.closest('g.legend')).map((t) => ({
          text: t.textContent.trim(), anchor: t.getAttribute('text-anchor') || 'start',
          rotated: (t.getAttribute('transform') || '').includes('rotate')})),
        images: [...f.querySelectorAll('img')].map((i) => i.complete && i.naturalWidth > 0),
      };
    });
}"""


def overlaps(a, b):
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def expected_series(kind, info, metric):
    """The series a plot of `metric` must draw, from what the run directory stores."""
    verdict = info["verdict_json"]
    rules = {r["rule"]: r for r in verdict["rules"]}
    want = set()
    if kind == "multi-seed":
        want |= {f"seed {s}" for s in info["seeds"]}
        want.add(GOLDEN)
        if f"seeds:{metric}" in rules:
            want.add(SEEDS_WINDOW)
    else:
        want.add(RUN)
        rule = rules.get(f"golden:{metric}")
        if rule:
            want.add(GOLDEN)
            if any(p["first"] != p["last"] for p in rule.get("points", [])):
                want.add(WINDOW)
    failing = [r for r in verdict["rules"]
               if r["status"] != "pass" and metric in r.get("metrics", [])
               and (r.get("failing_steps") or any(p["status"] != "pass"
                                                   for p in r.get("points", [])))]
    if failing:
        want.add(FAILING)
    return want


def check_plot(kind, info, plot):
    """The problems of one plot."""
    m = plot["metric"] or "(a plot without a metric)"
    problems = []
    if plot["box"]["w"] < 50 or plot["box"]["h"] < 50:
        problems.append(f"plot {m}: not rendered (its box is {plot['box']})")
    if not all(plot["images"]):
        problems.append(f"plot {m}: an image did not load")
    drawn = {s["name"] for s in plot["series"] if s["marks"] > 0}
    if not drawn:
        problems.append(f"plot {m}: no data series drawn (only bands or nothing)")
    missing = sorted(expected_series(kind, info, m) - drawn)
    if missing:
        problems.append(f"plot {m}: series not drawn: {', '.join(missing)} (drawn: "
                        f"{', '.join(sorted(drawn)) or 'none'})")
    if not plot["legend"]:
        problems.append(f"plot {m}: no legend (<g class=\"legend\">)")
    for legend in plot["legend"]:
        covered = [s["name"] for s in plot["series"] if s["marks"] and overlaps(legend, s["box"])]
        if covered:
            problems.append(f"plot {m}: the legend covers data: {', '.join(covered)}")
    if not any(t["rotated"] and t["text"] == m for t in plot["texts"]):
        problems.append(f"plot {m}: no y-axis label with the metric's name")
    # Tick labels: the axes' texts other than the caption and the axis descriptions; x ticks
    # are centred under the axis, y ticks right-aligned beside it.
    for anchor, axis in (("middle", "x"), ("end", "y")):
        ticks = [t["text"] for t in plot["texts"]
                 if t["anchor"] == anchor and not t["rotated"] and t["text"] not in (m, "step")]
        repeated = sorted({t for t in ticks if ticks.count(t) > 1})
        if repeated:
            problems.append(f"plot {m}: {axis} tick labels repeat ({', '.join(repeated)}), "
                            f"so neighbouring ticks read the same: {ticks}")
    return problems


def check_page(page, kind, html, info):
    """The problems of one report page."""
    problems = []
    top = page.evaluate(FIND_TOP_JS, info["verdict"])
    if top is None:
        problems.append(f"the verdict {info['verdict']!r} is not shown")
    elif top["top"] > 250 or not top["before"]:
        problems.append(f"the verdict {info['verdict']!r} is not at the top (a <{top['tag']}> "
                        f"{top['top']:.0f} px down, before the first table or plot: "
                        f"{top['before']})")
    for rule in info.get("failing", []):
        at = page.evaluate(FIND_TOP_JS, rule)
        if at is None or not at["before"]:
            problems.append(f"failing rule {rule!r} is not named above the rules table and "
                            f"the plots")
    plots = page.evaluate(PLOTS_JS)
    if info.get("plots") and not plots:
        problems.append("no plot")
    for plot in plots:
        problems += check_plot(kind, info, plot)
    for w in page.evaluate(WRAPS_JS):
        problems.append(f"number {w['number']!r} wraps inside a table cell ({w['cell']!r})")
    # With the folded tables opened: long knob paths and override lists wrap, nothing scrolls
    # sideways.
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    if width[0] > width[1]:
        problems.append(f"the page is wider than the window ({width[0]} px in {width[1]} px): "
                        f"it scrolls sideways")
    emoji = page.evaluate(EMOJI_JS)
    if emoji:
        problems.append(f"emoji in the page (blank boxes without an emoji font): "
                        f"{' '.join(emoji)}")
    return problems


def open_and_check(browser, kind, html, info, shots=True):
    """Open one report and check it: its problems (and the screenshots, when `shots`)."""
    page = browser.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(html.as_uri(), wait_until="load")
    problems = check_page(page, kind, html, info)
    problems += [f"console error: {e}" for e in errors]
    paths = screenshots(page, html) if shots else []
    page.close()
    return (problems, paths) if shots else problems


def screenshots(page, html):
    """The whole page and each plot, into screenshots/ beside the report."""
    d = html.parent / "screenshots"
    d.mkdir(exist_ok=True)
    paths = [d / "page.png"]
    page.screenshot(path=str(paths[0]), full_page=True)
    for i, f in enumerate(page.query_selector_all("figure")):
        metric = f.get_attribute("data-metric") or f"plot-{i}"
        p = d / ("plot-" + "".join(c if c.isalnum() else "_" for c in metric) + ".png")
        f.screenshot(path=str(p))
        paths.append(p)
    return paths


# Broken copies of the reports, each of which one check must catch: proof that the checks can
# fail. (name, report kind, how to break its report.html, what the problem must say)
def _drop_series(name):
    return lambda h: re.sub(
        r'<g class="series" data-series="' + re.escape(name) + r'">.*?</g>\n', "", h, flags=re.S)


BROKEN = [
    ("emoji mark", "failing run", lambda h: h.replace("<h1 class=\"fail\">", "<h1>\u274c ", 1),
     "emoji in the page"),
    ("console error", "single run",
     lambda h: h.replace("</body>", "<script>console.error('broken fixture')</script></body>"),
     "console error: broken fixture"),
    ("missing image", "single run",
     lambda h: h.replace("</figure>", "<img src=\"missing.png\" alt=\"\"></figure>", 1),
     "an image did not load"),
    ("verdict at the bottom", "single run",
     lambda h: re.sub(r"(<h1.*?</h1>\n)(.*)</body>", r"\2\1</body>", h, flags=re.S),
     "is not at the top"),
    ("no failing line", "failing run",
     lambda h: re.sub(r"<p>Exit status .*?</p>\n", "", h, count=1, flags=re.S),
     "is not named above the rules table"),
    ("bands only", "multi-seed",
     lambda h: re.sub(r'<g class="series" .*?</g>\n', "", h, flags=re.S),
     "no data series drawn"),
    ("no window values", "single run", _drop_series(WINDOW), f"series not drawn: {WINDOW}"),
    ("no failing marks", "failing run", _drop_series(FAILING), f"series not drawn: {FAILING}"),
    ("legend over the data", "single run",
     lambda h: h.replace('<g class="legend">', '<g class="legend" transform="translate(-300,0)">'),
     "the legend covers data"),
    ("no y-axis label", "single run", lambda h: h.replace('transform="rotate(', 'data-r="('),
     "no y-axis label"),
    ("repeated ticks", "single run",
     lambda h: re.sub(r'(<text[^>]*text-anchor="end"[^>]*>\n)[^<\n]*', r"\g<1>0.0", h),
     "tick labels repeat"),
    ("numbers wrap", "multi-seed",
     # Without nowrap, and with a style that lets a number break anywhere (as `overflow-wrap:
     # anywhere` in a page's theme would): the check must see the digits split, whatever numbers
     # this run's table happens to hold.
     lambda h: h.replace("td.n,td.nw,.nw{white-space:nowrap}",
                         "td.n{width:1px;word-break:break-all}"),
     "wraps inside a table cell"),
    ("sideways scroll", "failing run",
     lambda h: h.replace("</body>", "<div style=\"width:3000px\">wide</div></body>"),
     "scrolls sideways"),
]


def check_broken(browser, reports, out):
    """Each broken copy must fail the check it breaks; the problems of those that do not."""
    by_kind = {kind: (html, info) for kind, html, info in reports if html is not None}
    problems = []
    for name, kind, breaks, expected in BROKEN:
        if kind not in by_kind:
            continue
        html, info = by_kind[kind]
        text = html.read_text()
        broken = breaks(text)
        if broken == text:
            problems.append(f"broken fixture {name!r} changed nothing in the {kind} report")
            continue
        # Beside the original, so its links and the files the checks read resolve alike.
        copy = html.with_name(f"broken-{re.sub(r'[^a-z]+', '-', name)}.html")
        copy.write_text(broken)
        found = open_and_check(browser, kind, copy, describe(kind, html, info), shots=False)
        if not any(expected in p for p in found):
            problems.append(f"broken fixture {name!r} ({copy.name}) was not caught: no problem "
                            f"says {expected!r} (problems: {found})")
    return problems


def describe(kind, html, info):
    """What the checks need to know of a report, from the files beside it."""
    info = dict(info)
    if "run_dir" in info:
        d = info["run_dir"]
        v = json.loads((d / "verdict.json").read_text())
        info["verdict_json"] = v
        info["verdict"] = f"{v['scenario']}: {v['summary']}"
        info["failing"] = [r["rule"] for r in v["rules"] if r["status"] != "pass"]
        info["plots"] = True
        if (d / "seeds.json").is_file():
            info["seeds"] = json.loads((d / "seeds.json").read_text())["seeds"]
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "target/debug/rlharness"),
                    help="the rlharness binary (default: target/debug/rlharness)")
    ap.add_argument("--out", default=str(ROOT / "target/browser-tests"),
                    help="where the reports and screenshots go (emptied first)")
    args = ap.parse_args()
    binary, out = Path(args.bin).resolve(), Path(args.out).resolve()
    if not binary.is_file():
        sys.exit(f"check_reports.py: no rlharness binary at {binary}: build it first "
                 f"(`cargo build -p rlharness`), or pass --bin")
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    reports = make_reports(binary, out)
    print(f"check_reports.py: made {len(reports)} reports in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    failures = 0
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        browser = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport=VIEWPORT)
        for kind, html, info in reports:
            if html is None:
                print(f"report {kind}: could not be made: {info['error']}")
                failures += 1
                continue
            problems, shots = open_and_check(browser, kind, html, describe(kind, html, info))
            rel = html.relative_to(ROOT) if html.is_relative_to(ROOT) else html
            for p in problems:
                print(f"report {kind} ({rel}): {p}")
            failures += len(problems)
            status = "ok" if not problems else f"{len(problems)} problem(s)"
            print(f"check_reports.py: {kind}: {status}; {len(shots)} screenshot(s) in "
                  f"{shots[0].parent}", file=sys.stderr)
        broken = check_broken(browser, reports, out)
        for p in broken:
            print(f"check_reports.py: {p}")
        failures += len(broken)
        print(f"check_reports.py: {len(BROKEN) - len(broken)} of {len(BROKEN)} broken copies "
              f"caught", file=sys.stderr)
        browser.close()
    took = time.monotonic() - started
    if failures:
        print(f"check_reports.py: FAILED: {failures} problem(s) in {len(reports)} reports "
              f"({took:.1f} s)", file=sys.stderr)
        return 1
    print(f"check_reports.py: passed: {len(reports)} reports ({took:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
