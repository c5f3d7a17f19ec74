"""Checks a `headroom report --html` page against the JSON of the same
report:

    check_html.py PAGE.html REPORT.json [--kind plan|autofit|sweep]

- well-formed: every element closed in order (void elements aside);
- self-contained: no script, no link, no src/href, no url(...) or @import,
  no URL but the SVG namespace;
- its numbers are the JSON's: every data-bytes of a part, the peak, the
  budget and each auto-fit candidate or sweep policy, in order;
- nothing clipped: when Chromium is installed (scripts/setup installs
  Debian's), the page is rendered headless with a probe that measures every
  SVG text's box against its canvas and every table cell's content against
  its box; without it, one line says the render check was skipped.
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

VOID = {"meta", "br", "img", "hr", "input", "link", "col", "area", "base",
        "embed", "source", "track", "wbr"}
# SVG elements written self-closed.
SELF_CLOSED = {"rect", "line", "polygon", "polyline", "circle", "path"}

PARTS = {  # the page's part names -> the JSON breakdown's keys
    "parameters": "parameters",
    "optimizer state": "optimizer_state",
    "gradient accumulators": "gradient_accumulators",
    "frozen weights": "frozen",
    "buffers": "buffers",
    "alignment padding (state)": "state_padding",
    "activations": "activations",
    "gradients": "gradients",
    "temporaries": "temporaries",
    "recomputed": "recomputed",
    "fragmentation (arena - live)": "fragmentation",
    "workspace (libraries)": "library_workspace",
}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors = [], []
        self.parts = {}     # part name -> bytes (bar and table must agree)
        self.rows = []      # data-bytes of table rows' cells, in order
        self.peak = None
        self.budget = None
        self.tags = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag not in VOID:
            self.stack.append(tag)
        if "data-part" in a:
            b = int(a["data-bytes"])
            if self.parts.setdefault(a["data-part"], b) != b:
                self.errors.append("part %s: %d and %d" %
                                   (a["data-part"], self.parts[a["data-part"]], b))
        elif tag == "b" and "data-bytes" in a:
            if self.peak is None:
                self.peak = int(a["data-bytes"])
            else:
                self.budget = int(a["data-bytes"])
        elif tag == "td" and "data-bytes" in a:
            self.rows.append(int(a["data-bytes"]))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if "data-part" in dict(attrs):
            self.handle_starttag(tag, attrs)
            if tag not in VOID:
                self.stack.pop()

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append("</%s> closes <%s>" %
                               (tag, self.stack[-1] if self.stack else "nothing"))
            return
        self.stack.pop()


def render_check(path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("chromium not installed: the render check (no clipped text) "
              "was skipped")
        return []
    probe = """<script>
var bad = [];
document.querySelectorAll('svg').forEach(function (svg) {
  var box = svg.getBoundingClientRect();
  svg.querySelectorAll('text').forEach(function (t) {
    var r = t.getBoundingClientRect();
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5 ||
        r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
      bad.push('svg text clipped: "' + t.textContent + '" spans x ' +
               (r.left - box.left).toFixed(1) + '..' +
               (r.right - box.left).toFixed(1) + ', y ' +
               (r.top - box.top).toFixed(1) + '..' +
               (r.bottom - box.top).toFixed(1) + ' of ' +
               box.width.toFixed(0) + 'x' + box.height.toFixed(0));
  });
});
document.querySelectorAll('td, th').forEach(function (c) {
  if (c.scrollWidth > c.clientWidth + 1)
    bad.push('cell clipped: "' + c.textContent + '"');
});
if (document.documentElement.scrollWidth > window.innerWidth + 1)
  bad.push('page wider than the window: ' +
           document.documentElement.scrollWidth);
document.body.setAttribute('data-clipped', JSON.stringify(bad));
</script>"""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        probed = os.path.join(tmp, "page.html")
        with open(probed, "w", encoding="utf-8") as f:
            f.write(text.replace("</body>", probe + "</body>"))
        out = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--window-size=1040,1400", "--user-data-dir=" + tmp,
             "--dump-dom", "file://" + probed],
            capture_output=True, text=True, timeout=120)
    m = re.search(r'data-clipped="([^"]*)"', out.stdout)
    if not m:
        return ["chromium gave no result: " + out.stderr[-500:]]
    return json.loads(html.unescape(m.group(1)))


def main():
    page_path, json_path = sys.argv[1], sys.argv[2]
    kind = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--kind" else "plan"
    with open(page_path, encoding="utf-8") as f:
        text = f.read()
    with open(json_path) as f:
        report = json.load(f)
    p = Page()
    p.feed(text)
    p.close()
    errors = list(p.errors)
    if p.stack:
        errors.append("unclosed: %s" % p.stack)
    for tag, a in p.tags:
        if tag in ("script", "link", "iframe", "img", "object", "embed"):
            errors.append("<%s> in a self-contained page" % tag)
        for attr in ("src", "href"):
            if attr in a:
                errors.append("<%s %s=%s>" % (tag, attr, a[attr]))
    for url in re.findall(r"https?://[^\s\"'<>)]+", text):
        if url != "http://www.w3.org/2000/svg":
            errors.append("external URL " + url)
    if re.search(r"url\(|@import", text):
        errors.append("CSS fetches something (url( or @import)")

    if kind in ("plan", "autofit"):
        plan = report["report"] if kind == "autofit" else report
        b = plan["breakdown"]
        if p.peak != plan["peak_bytes"]:
            errors.append("peak %s, JSON %d" % (p.peak, plan["peak_bytes"]))
        for name, key in PARTS.items():
            if b.get(key, 0) != p.parts.get(name, 0):
                errors.append("%s: page %s, JSON %d" %
                              (name, p.parts.get(name), b.get(key, 0)))
        kernels = b["workspace"] - b["library_workspace"]
        if p.parts.get("workspace (kernels)", 0) != kernels:
            errors.append("workspace (kernels): page %s, JSON %d" %
                          (p.parts.get("workspace (kernels)"), kernels))
        if sum(p.parts.values()) != plan["peak_bytes"]:
            errors.append("the parts add up to %d, not the peak %d" %
                          (sum(p.parts.values()), plan["peak_bytes"]))
        values = [v["bytes"] for v in plan["peak"]["values"]]
        if p.rows[:len(values)] != values:
            errors.append("values at the peak %s, JSON %s" %
                          (p.rows[:len(values)], values))
        rows = p.rows[len(values):]
        ranks = [int(a["data-ranks"]) for _, a in p.tags if "data-ranks" in a]
        dp = plan.get("data_parallel", {}).get("ranks", 1)
        want = [dp] if dp > 1 else []
        if ranks != want:
            errors.append("data-parallel ranks: page %s, JSON %s" % (ranks, want))
    else:
        rows = p.rows
    if kind == "autofit":
        if p.budget != report["memory_budget_bytes"]:
            errors.append("budget %s, JSON %d" %
                          (p.budget, report["memory_budget_bytes"]))
        want = [c["peak_bytes"] for c in report["candidates"]]
        if rows != want:
            errors.append("candidates %s, JSON %s" % (rows, want))
    if kind == "sweep":
        want = [c["peak_bytes"] for c in report]
        if rows != want:
            errors.append("policies %s, JSON %s" % (rows, want))

    errors += render_check(page_path)
    for e in errors:
        print("check_html: " + e)
    if errors:
        sys.exit(1)
    print("check_html: %s is well-formed, self-contained, and says what the "
          "JSON says" % os.path.basename(page_path))


if __name__ == "__main__":
    main()
