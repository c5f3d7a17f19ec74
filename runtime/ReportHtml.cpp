//===- ReportHtml.cpp - "Will it fit?" as pictures ------------------------===//
//
// The report's figures drawn: the SVG timeline of `report --svg`, the
// recomputation frontier of `--recompute sweep --svg`, and the one
// self-contained HTML page of `report --html` (inline SVG and CSS, no script,
// nothing fetched), which puts them together with the breakdown of the peak
// as a bar against the budget, what lives at the peak, and auto-fit's
// candidates. Every number comes from the plan's MemoryReport, the same the
// table and the JSON print; elements that show a byte count carry it in a
// data-bytes attribute, so tests compare them with the JSON exactly.
//
// Text is placed by an estimate of its width (kCharWidth em per character,
// above DejaVu Sans' average) and kept inside the canvas; a headless
// browser checks the real boxes in scripts/test (test/cli/html.test).
//
//===----------------------------------------------------------------------===//
#include "runtime/Report.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <array>
#include <cmath>

using namespace headroom;

namespace {

constexpr double kCharWidth = 0.62, kBoldCharWidth = 0.7;

std::string escape(llvm::StringRef s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string num(double v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.1f", v);
  return os.str();
}

/// A tick step near range / target: 1, 2, 2.5 or 5 times a power of ten.
double niceStep(double range, int target) {
  if (range <= 0)
    return 1;
  double raw = range / target,
         mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw)
      return m * mag;
  return 10 * mag;
}

/// Round byte ticks: a binary unit the range reaches, a nice step in it.
struct ByteAxis {
  double Unit = 1, Step = 1, Max = 1;
  const char *UnitName = "B";
  explicit ByteAxis(double maxBytes, int ticks = 5) {
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (k < 4 && maxBytes >= 1024.0 * std::pow(1024.0, k))
      ++k;
    Unit = std::pow(1024.0, k);
    UnitName = names[k];
    Step = niceStep(std::max(maxBytes, 1.0) / Unit, ticks) * Unit;
    if (k == 0)
      Step = std::max(1.0, std::round(Step));
    Max = std::ceil(std::max(maxBytes, 1.0) / Step) * Step;
  }
  std::string label(double bytes, const char *sign = "") const {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << sign << llvm::format("%g", bytes / Unit) << " " << UnitName;
    return os.str();
  }
};

/// An SVG canvas whose text stays inside it.
class Svg {
public:
  Svg(llvm::raw_ostream &os, double w, double h, llvm::StringRef label)
      : W(w), H(h), OS(os) {
    OS << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
       << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
       << "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" "
          "aria-label=\""
       << escape(label) << "\">\n<rect width=\"" << W << "\" height=\"" << H
       << "\" fill=\"white\"/>\n";
  }
  ~Svg() { OS << "</svg>\n"; }

  static double width(llvm::StringRef s, double size, bool bold = false) {
    return (bold ? kBoldCharWidth : kCharWidth) * size * double(s.size());
  }
  /// `s` at (x, y) anchored start, middle or end, moved (and, when wider
  /// than the canvas, cut) to stay inside it.
  void text(double x, double y, llvm::StringRef s,
            llvm::StringRef anchor = "start", double size = 12,
            llvm::StringRef attrs = "") {
    std::string t = s.str();
    bool bold = attrs.contains("bold");
    double room = W - 8;
    if (width(t, size, bold) > room) {
      size_t keep =
          size_t(room / ((bold ? kBoldCharWidth : kCharWidth) * size));
      t = t.substr(0, keep > 2 ? keep - 2 : 0) + "...";
    }
    double w = width(t, size, bold);
    double left = anchor == "end" ? x - w : anchor == "middle" ? x - w / 2 : x;
    left = std::min(std::max(left, 4.0), W - 4 - w);
    x = anchor == "end" ? left + w : anchor == "middle" ? left + w / 2 : left;
    OS << "<text x=\"" << num(x) << "\" y=\"" << num(y) << "\"";
    if (anchor != "start")
      OS << " text-anchor=\"" << anchor << "\"";
    if (size != 12)
      OS << " font-size=\"" << size << "\"";
    if (!attrs.empty())
      OS << " " << attrs;
    OS << ">" << escape(t) << "</text>\n";
  }
  void rect(double x, double y, double w, double h, llvm::StringRef fill,
            llvm::StringRef attrs = "") {
    OS << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\""
       << num(std::max(w, 0.0)) << "\" height=\"" << num(std::max(h, 0.0))
       << "\" fill=\"" << fill << "\"" << (attrs.empty() ? "" : " ") << attrs
       << "/>\n";
  }
  void line(double x1, double y1, double x2, double y2, llvm::StringRef stroke,
            llvm::StringRef attrs = "") {
    OS << "<line x1=\"" << num(x1) << "\" y1=\"" << num(y1) << "\" x2=\""
       << num(x2) << "\" y2=\"" << num(y2) << "\" stroke=\"" << stroke << "\""
       << (attrs.empty() ? "" : " ") << attrs << "/>\n";
  }
  /// A row of colour keys from (x, y), wrapping before the right edge.
  void legend(double x, double y,
              llvm::ArrayRef<std::pair<std::string, std::string>> keys) {
    double cx = x, cy = y;
    for (const auto &[name, color] : keys) {
      double w = 18 + width(name, 12) + 16;
      if (cx + w > W - 4 && cx > x) {
        cx = x;
        cy += 18;
      }
      rect(cx, cy - 10, 12, 12, color);
      text(cx + 16, cy, name);
      cx += w;
    }
  }
  llvm::raw_ostream &os() { return OS; }
  double W, H;

private:
  llvm::raw_ostream &OS;
};

struct Category {
  const char *Name, *Color;
};
/// The timeline's transient categories (MemoryReport::Timeline's order).
const Category kTransient[kTransientKinds] = {{"activations", "#4e79a7"},
                                              {"gradients", "#e15759"},
                                              {"temporaries", "#f28e2b"},
                                              {"recomputed", "#59a14f"}};
const char *const kStateColor = "#9e9e9e", *const kForwardShade = "#eef3fa",
                  *const kUpdateColor = "#2e7d32",
                  *const kBudgetColor = "#c62828";

/// What stays allocated the whole step: state, its padding, workspace.
uint64_t constantBytes(const MemoryReport &r) {
  return r.StateBytes() + r.StatePadding + r.WorkspaceBytes();
}

/// The timeline's columns: at most ~800, each the busiest of its `Per`
/// calls (keeps every peak), and the most bytes of any.
struct TimelineColumns {
  std::vector<std::array<uint64_t, kTransientKinds>> Cols;
  size_t Per = 1;
  uint64_t Most = 0;
};

TimelineColumns timelineColumns(const MemoryReport &r) {
  TimelineColumns out;
  out.Per = std::max<size_t>(1, (r.Timeline.size() + 799) / 800);
  auto total = [](const std::array<uint64_t, kTransientKinds> &t) {
    return t[0] + t[1] + t[2] + t[3];
  };
  for (size_t i = 0; i < r.Timeline.size(); i += out.Per) {
    std::array<uint64_t, kTransientKinds> best = r.Timeline[i];
    for (size_t j = i; j < std::min(i + out.Per, r.Timeline.size()); ++j)
      if (total(r.Timeline[j]) > total(best))
        best = r.Timeline[j];
    out.Cols.push_back(best);
    out.Most = std::max(out.Most, total(best));
  }
  return out;
}

/// The timeline: the constant part as a band at the bottom, the transient
/// part above it on its own scale, the forward shaded, updates ticked, the
/// peak and (when given) the budget marked.
void drawTimeline(const MemoryReport &r, llvm::StringRef title, uint64_t budget,
                  llvm::raw_ostream &os) {
  const double W = 960, H = 440, left = 80, right = 24, top = 44;
  const double plotBottom = H - 112, bandH = 46, gap = 8;
  const double pw = W - left - right, base = plotBottom - bandH - gap;
  const double ph = base - top;
  Svg svg(os, W, H, "memory over the training step");
  svg.text(left, 24,
           title.empty() ? std::string("Memory over the training step")
                         : "Memory over the training step: " + title.str(),
           "start", 15, "font-weight=\"bold\"");
  TimelineColumns tc = timelineColumns(r);
  const auto &cols = tc.Cols;
  size_t per = tc.Per;
  uint64_t most = tc.Most;
  size_t n = std::max<size_t>(cols.size(), 1);
  uint64_t constant = constantBytes(r);
  ByteAxis axis(double(std::max(r.ArenaBytes, most)) * 1.04 + 1);
  auto x = [&](double col) { return left + pw * col / double(n); };
  auto xCall = [&](double call) { return x(call / double(per)); };
  auto y = [&](double transient) { return base - ph * transient / axis.Max; };
  // The forward, shaded, and the phases named.
  if (r.LossPosition >= 0) {
    double xl = xCall(double(r.LossPosition + 1));
    svg.rect(left, top, xl - left, ph, kForwardShade);
    svg.text(left + 6, top + 14, "forward", "start", 12, "fill=\"#555\"");
    svg.text(std::min(xl + 6, left + pw - 150), top + 14,
             r.UpdatePositions.empty() ? "backward" : "backward and updates",
             "start", 12, "fill=\"#555\"");
  }
  // Stacked transient categories, top layer first.
  for (int layer = 3; layer >= 0; --layer) {
    os << "<polygon fill=\"" << kTransient[layer].Color << "\" points=\""
       << num(x(0)) << "," << num(y(0)) << " ";
    for (size_t i = 0; i < cols.size(); ++i) {
      double sum = 0;
      for (int k = 0; k <= layer; ++k)
        sum += double(cols[i][k]);
      os << num(x(double(i))) << "," << num(y(sum)) << " " << num(x(i + 1.0))
         << "," << num(y(sum)) << " ";
    }
    os << num(x(double(n))) << "," << num(y(0)) << "\"/>\n";
  }
  // The constant band.
  svg.rect(left, plotBottom - bandH, pw, bandH, kStateColor,
           "data-bytes=\"" + std::to_string(constant) + "\"");
  svg.text(left + 8, plotBottom - bandH / 2 + 4,
           "constant over the step: " + formatBytes(constant) +
               " (parameters, optimizer state, accumulators, workspace)",
           "start", 12, "fill=\"white\"");
  // Updates: a tick each, on the band's top edge.
  for (int64_t u : r.UpdatePositions) {
    double ux = xCall(double(u) + 0.5);
    svg.line(ux, plotBottom - bandH - 7, ux, plotBottom - bandH + 1,
             kUpdateColor, "stroke-width=\"1.5\"");
  }
  // Axes and round ticks: transient bytes above the band, calls below.
  svg.line(left, top, left, base, "black");
  svg.line(left, base, left + pw, base, "black");
  for (double b = 0; b <= axis.Max + axis.Step / 2; b += axis.Step) {
    svg.line(left - 4, y(b), left, y(b), "black");
    svg.text(left - 7, y(b) + 4, axis.label(b, b > 0 ? "+" : ""), "end");
  }
  os << "<text transform=\"translate(16," << num(top + ph / 2)
     << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"11\" "
        "fill=\"#555\">transient, above the constant part</text>\n";
  double calls = double(r.Timeline.size());
  double step = niceStep(std::max(calls, 1.0), 8);
  step = std::max(1.0, std::round(step));
  for (double c = 0; c <= calls; c += step) {
    svg.line(xCall(c), plotBottom, xCall(c), plotBottom + 4, "black");
    svg.text(xCall(c), plotBottom + 17, std::to_string(int64_t(c)), "middle");
  }
  svg.text(left + pw / 2, plotBottom + 34, "kernel call in the step's schedule",
           "middle");
  // The planned peak of the transient part, the budget, the peak's call.
  uint64_t peak = r.PeakBytes();
  auto mark = [&](double transient, llvm::StringRef color,
                  const std::string &label, uint64_t bytes, bool below) {
    double ly = y(transient);
    svg.line(left, ly, left + pw, ly, color,
             "stroke-dasharray=\"6,4\" data-bytes=\"" + std::to_string(bytes) +
                 "\"");
    svg.text(left + pw - 4, below ? ly + 14 : ly - 4, label, "end", 12,
             ("fill=\"" + color + "\"").str());
  };
  // Two lines closer than a label's height: the lower one's label goes
  // under it.
  bool showBudget = budget > constant && double(budget - constant) <= axis.Max;
  double peakY = y(double(r.ArenaBytes)),
         budgetY = showBudget ? y(double(budget - constant)) : -1e9;
  bool close = std::fabs(peakY - budgetY) < 16;
  mark(double(r.ArenaBytes), "black", "planned peak " + formatBytes(peak), peak,
       close && peakY >= budgetY);
  if (showBudget)
    mark(double(budget - constant), kBudgetColor,
         "budget " + formatBytes(budget), budget, close && budgetY > peakY);
  if (r.PeakPosition >= 0) {
    double px = xCall(double(r.PeakPosition) + 0.5);
    svg.line(px, top, px, base, "black", "stroke-dasharray=\"2,3\"");
    std::string what = "peak after " + r.PeakOp;
    bool rightSide = px + Svg::width(what, 12) + 8 < left + pw;
    svg.text(rightSide ? px + 5 : px - 5, top + 32, what,
             rightSide ? "start" : "end");
  }
  std::vector<std::pair<std::string, std::string>> keys;
  for (const Category &c : kTransient)
    keys.push_back({c.Name, c.Color});
  keys.push_back({"constant part", kStateColor});
  keys.push_back({"forward", "#c9d7ee"});
  keys.push_back({"update", kUpdateColor});
  svg.legend(left, plotBottom + 62, keys);
}

/// Peak memory over extra FLOPs, a dot per policy, the frontier joined and
/// named.
void drawSweep(llvm::ArrayRef<SweepPoint> points, llvm::StringRef title,
               llvm::raw_ostream &os) {
  const double W = 960, H = 500, left = 80, right = 24, top = 44, bottom = 96;
  const double pw = W - left - right, ph = H - top - bottom;
  auto extra = [](const MemoryReport &r) {
    return extraShare(r.RecomputeFlops, r.StepFlops);
  };
  uint64_t most = 1;
  double xmax = 0.01;
  for (const SweepPoint &p : points) {
    most = std::max(most, p.Report->PeakBytes());
    xmax = std::max(xmax, extra(*p.Report));
  }
  ByteAxis axis(double(most) * 1.04);
  double xStep = niceStep(xmax * 100, 6) / 100;
  double xm = std::ceil(xmax * 1.08 / xStep) * xStep;
  auto x = [&](double f) { return left + pw * f / xm; };
  auto y = [&](double b) { return top + ph - ph * b / axis.Max; };
  Svg svg(os, W, H, "peak memory over recomputed FLOPs");
  svg.text(left, 24,
           title.empty() ? std::string("Peak memory over recomputed FLOPs")
                         : "Peak memory over recomputed FLOPs: " + title.str(),
           "start", 15, "font-weight=\"bold\"");
  std::vector<bool> frontier = frontierOf(points);
  std::vector<size_t> order;
  for (size_t i = 0; i < points.size(); ++i)
    if (frontier[i])
      order.push_back(i);
  llvm::sort(order, [&](size_t a, size_t b) {
    return points[a].Report->RecomputeFlops < points[b].Report->RecomputeFlops;
  });
  os << "<polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\" "
        "points=\"";
  for (size_t i : order)
    os << num(x(extra(*points[i].Report))) << ","
       << num(y(double(points[i].Report->PeakBytes()))) << " ";
  os << "\"/>\n";
  svg.line(left, top, left, top + ph, "black");
  svg.line(left, top + ph, left + pw, top + ph, "black");
  for (double b = 0; b <= axis.Max + axis.Step / 2; b += axis.Step) {
    svg.line(left - 4, y(b), left, y(b), "black");
    svg.text(left - 7, y(b) + 4, axis.label(b), "end");
  }
  for (double f = 0; f <= xm + xStep / 2; f += xStep) {
    svg.line(x(f), top + ph, x(f), top + ph + 4, "black");
    std::string s;
    llvm::raw_string_ostream fs(s);
    fs << llvm::format("%g%%", std::round(f * 1000) / 10);
    svg.text(x(f), top + ph + 17, fs.str(), "middle");
  }
  svg.text(left + pw / 2, top + ph + 36,
           "recomputed FLOPs over the step without them", "middle");
  os << "<text transform=\"translate(16," << num(top + ph / 2)
     << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"11\" "
        "fill=\"#555\">planned peak</text>\n";
  // Dots, then the frontier's names, each label kept off the last one.
  double lastY = -100;
  for (size_t i = 0; i < points.size(); ++i) {
    const MemoryReport &r = *points[i].Report;
    os << "<circle cx=\"" << num(x(extra(r))) << "\" cy=\""
       << num(y(double(r.PeakBytes()))) << "\" r=\"4\" fill=\""
       << (frontier[i] ? "#4e79a7" : "#bbbbbb") << "\" data-bytes=\""
       << r.PeakBytes() << "\"><title>" << escape(points[i].Label) << ": "
       << formatBytes(r.PeakBytes()) << "</title></circle>\n";
  }
  for (size_t i : order) {
    const MemoryReport &r = *points[i].Report;
    double py = y(double(r.PeakBytes())) - 6;
    if (std::fabs(py - lastY) < 14)
      continue; // too close to the last name: the table names it
    lastY = py;
    svg.text(x(extra(r)) + 7, py,
             points[i].Label + " (" + formatBytes(r.PeakBytes()) + ")");
  }
  svg.legend(left, H - 30,
             {{"on the frontier", "#4e79a7"}, {"dominated", "#bbbbbb"}});
}

const char *const kCss = R"(
body { font-family: sans-serif; margin: 24px auto; max-width: 980px;
       color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
.verdict { font-size: 18px; padding: 10px 14px; border-radius: 6px;
           background: #f1f8e9; border-left: 6px solid #2e7d32; }
.verdict.over { background: #ffebee; border-left-color: #c62828; }
table { border-collapse: collapse; font-size: 13px; margin-top: 8px; }
td, th { padding: 3px 10px; text-align: left; vertical-align: middle; }
th { border-bottom: 1px solid #bbb; }
td.n { text-align: right; font-variant-numeric: tabular-nums;
       white-space: nowrap; }
tr.chosen { font-weight: bold; background: #fff8e1; }
.swatch { display: inline-block; width: 12px; height: 12px;
          margin-right: 6px; vertical-align: -1px; }
.bar { position: relative; width: 260px; height: 12px; background: #f2f2f2; }
.bar .fill { position: absolute; left: 0; top: 0; height: 12px; }
.bar .budget { position: absolute; top: -3px; width: 2px; height: 18px;
               background: #c62828; }
.note { color: #555; font-size: 13px; }
svg { display: block; margin-top: 8px; }
)";

struct Part {
  const char *Name, *Color;
  uint64_t Bytes;
};

/// The device's peak, part by part (what the table's rows add up to; state
/// in the host pool is not on the device).
std::vector<Part> peakParts(const Plan &plan) {
  const MemoryReport &r = plan.Report;
  return {{"parameters", "#6d6d6d",
           r.Parameters - hostStateBytes(plan, StateKind::Param)},
          {"optimizer state", "#9c755f",
           r.OptimizerState - hostStateBytes(plan, StateKind::Optimizer)},
          {"gradient accumulators", "#b07aa1",
           r.GradientState - hostStateBytes(plan, StateKind::Gradient)},
          {"frozen weights", "#8c8c8c", r.Frozen},
          {"buffers", "#bab0ac", r.Buffers},
          {"alignment padding (state)", "#d9d9d9", r.StatePadding},
          {"activations", kTransient[0].Color, r.Activations},
          {"gradients", kTransient[1].Color, r.Gradients},
          {"temporaries", kTransient[2].Color, r.Temporaries},
          {"recomputed", kTransient[3].Color, r.Recomputed},
          {"fragmentation (arena - live)", "#edc948",
           r.ArenaBytes - r.transientAtPeak()},
          {"workspace (kernels)", "#76b7b2", r.Workspace},
          {"workspace (libraries)", "#a0cbe8", r.LibraryBytes}};
}

/// The peak as one bar of its parts against the budget.
void drawBreakdown(const Plan &plan, uint64_t budget, llvm::raw_ostream &os) {
  const MemoryReport &r = plan.Report;
  const double W = 960, H = 92, left = 16, right = 16, barY = 38, barH = 26;
  uint64_t peak = r.PeakBytes();
  double scale = double(std::max(peak, budget)) * 1.03 + 1;
  double pw = W - left - right;
  auto x = [&](double b) { return left + pw * b / scale; };
  Svg svg(os, W, H, "the peak by part");
  double at = 0;
  for (const Part &p : peakParts(plan)) {
    if (!p.Bytes)
      continue;
    std::string title = std::string(p.Name) + ": " + formatBytes(p.Bytes);
    svg.os() << "<rect x=\"" << num(x(at)) << "\" y=\"" << barY << "\" width=\""
             << num(x(at + double(p.Bytes)) - x(at)) << "\" height=\"" << barH
             << "\" fill=\"" << p.Color << "\" data-part=\"" << p.Name
             << "\" data-bytes=\"" << p.Bytes << "\"><title>" << escape(title)
             << "</title></rect>\n";
    at += double(p.Bytes);
  }
  svg.text(x(double(peak)), barY - 8, "peak " + formatBytes(peak), "middle", 12,
           "data-bytes=\"" + std::to_string(peak) + "\"");
  if (budget) {
    svg.line(x(double(budget)), barY - 6, x(double(budget)), barY + barH + 6,
             kBudgetColor,
             "stroke-width=\"2\" data-bytes=\"" + std::to_string(budget) +
                 "\"");
    svg.text(x(double(budget)), barY + barH + 20,
             "budget " + formatBytes(budget), "middle", 12,
             std::string("fill=\"") + kBudgetColor + "\"");
  }
}

void partsTable(const Plan &plan, llvm::raw_ostream &os) {
  const MemoryReport &r = plan.Report;
  uint64_t peak = std::max<uint64_t>(r.PeakBytes(), 1);
  os << "<table class=\"parts\">\n<tr><th>part</th><th>bytes</th>"
        "<th>share of the peak</th></tr>\n";
  for (const Part &p : peakParts(plan)) {
    if (!p.Bytes)
      continue;
    os << "<tr><td><span class=\"swatch\" style=\"background:" << p.Color
       << "\"></span>" << p.Name << "</td><td class=\"n\" data-part=\""
       << p.Name << "\" data-bytes=\"" << p.Bytes << "\">"
       << formatBytes(p.Bytes) << "</td><td class=\"n\">"
       << llvm::format("%.1f%%", 100.0 * double(p.Bytes) / double(peak))
       << "</td></tr>\n";
  }
  os << "</table>\n";
}

void peakTable(const MemoryReport &r, llvm::raw_ostream &os) {
  if (r.PeakValues.empty())
    return;
  os << "<p>Transient memory peaks after <code>" << escape(r.PeakOp)
     << "</code>";
  if (!r.PeakLoc.empty())
    os << " at <code>" << escape(r.PeakLoc) << "</code>";
  os << " (call " << r.PeakPosition
     << " of the schedule). The largest values live there:</p>\n"
        "<table>\n<tr><th>bytes</th><th>kind</th><th>value</th><th>op</th>"
        "<th>location</th></tr>\n";
  for (const PeakValue &v : r.PeakValues)
    os << "<tr><td class=\"n\" data-bytes=\"" << v.Bytes << "\">"
       << formatBytes(v.Bytes) << "</td><td>"
       << kTransient[index(v.Category)].Name << "</td><td><code>"
       << escape(v.Name.empty() ? "" : "%" + v.Name) << "</code></td><td>"
       << escape(v.Op) << "</td><td><code>" << escape(v.Loc)
       << "</code></td></tr>\n";
  os << "</table>\n";
}

void candidatesTable(const ReportPage &page, llvm::raw_ostream &os) {
  uint64_t scale = page.BudgetBytes;
  for (const PageCandidate &c : page.Candidates)
    scale = std::max(scale, c.PeakBytes);
  double s = double(scale) * 1.03 + 1;
  os << "<p>" << escape(page.Why) << ".</p>\n"
     << "<table class=\"candidates\">\n<tr><th></th><th>candidate</th>"
        "<th>rank</th><th>FLOPs +</th><th>peak</th><th>against the budget "
        "(red)</th></tr>\n";
  for (size_t i = 0; i < page.Candidates.size(); ++i) {
    const PageCandidate &c = page.Candidates[i];
    double extra = 100 * extraShare(c.ExtraFlops, c.StepFlops);
    os << "<tr" << (i == 0 ? " class=\"chosen\"" : "") << "><td>"
       << (i == 0   ? "chosen"
           : c.Fits ? "fits"
                    : "")
       << "</td><td>" << escape(c.Label)
       << (c.Approximate ? " (approximate)" : "") << "</td><td class=\"n\">"
       << c.Rank << "</td><td class=\"n\">" << llvm::format("%.1f%%", extra)
       << "</td><td class=\"n\" data-bytes=\"" << c.PeakBytes << "\">"
       << formatBytes(c.PeakBytes)
       << "</td><td><div class=\"bar\"><div class=\"fill\" style=\"width:"
       << llvm::format("%.2f", 100.0 * double(c.PeakBytes) / s)
       << "%;background:" << (c.Fits ? "#4e79a7" : "#bbbbbb")
       << "\"></div><div class=\"budget\" style=\"left:"
       << llvm::format("%.2f", 100.0 * double(page.BudgetBytes) / s)
       << "%\"></div></div></td></tr>\n";
  }
  os << "</table>\n<p class=\"note\">rank: 0 exact techniques, 1 bf16, 2 bf16 "
        "without master weights, 3 that with 8-bit AdamW state "
        "(approximate), 4-6 the same with another optimizer, 7 LoRA adapters "
        "instead of every weight, 8 those on an NF4 base (QLoRA, "
        "approximate). FLOPs +: extra "
        "FLOPs (recomputation, a norm pass) over the step without them.</p>\n";
}

void sweepTable(llvm::ArrayRef<SweepPoint> points, llvm::raw_ostream &os) {
  std::vector<bool> frontier = frontierOf(points);
  os << "<table>\n<tr><th></th><th>policy</th><th>peak</th><th>kept at the "
        "loss</th><th>FLOPs +</th></tr>\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const MemoryReport &r = *points[i].Report;
    double extra = 100 * extraShare(r.RecomputeFlops, r.StepFlops);
    os << "<tr><td>" << (frontier[i] ? "frontier" : "") << "</td><td>"
       << escape(points[i].Label) << "</td><td class=\"n\" data-bytes=\""
       << r.PeakBytes() << "\">" << formatBytes(r.PeakBytes())
       << "</td><td class=\"n\">" << formatBytes(r.SavedActivations)
       << "</td><td class=\"n\">" << llvm::format("%.1f%%", extra)
       << "</td></tr>\n";
  }
  os << "</table>\n";
}

} // namespace

void headroom::printReportSvg(const Plan &plan, llvm::StringRef title,
                              llvm::raw_ostream &os) {
  drawTimeline(plan.Report, title, 0, os);
}

void headroom::printSweepSvg(llvm::ArrayRef<SweepPoint> points,
                             llvm::StringRef title, llvm::raw_ostream &os) {
  drawSweep(points, title, os);
}

void headroom::printReportHtml(const ReportPage &page, llvm::raw_ostream &os) {
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
        "charset=\"utf-8\">\n<title>headroom: "
     << escape(page.Title) << "</title>\n<style>" << kCss
     << "</style>\n</head>\n<body>\n<h1>Will it fit?</h1>\n<p class=\"note\">"
     << escape(page.Title) << "</p>\n";
  if (page.ThePlan) {
    const MemoryReport &r = page.ThePlan->Report;
    uint64_t peak = r.PeakBytes();
    bool over = page.BudgetBytes && peak > page.BudgetBytes;
    os << "<p class=\"verdict" << (over ? " over" : "")
       << "\">Planned peak <b data-bytes=\"" << peak << "\">"
       << formatBytes(peak) << "</b> on the "
       << escape(page.ThePlan->TargetName) << " target";
    if (page.BudgetBytes)
      os << (over ? ": over the budget of " : ": fits in the budget of ")
         << "<b data-bytes=\"" << page.BudgetBytes << "\">"
         << formatBytes(page.BudgetBytes) << "</b> ("
         << formatBytes(over ? peak - page.BudgetBytes
                             : page.BudgetBytes - peak)
         << (over ? " over" : " to spare") << ")";
    os << ".</p>\n<h2>What fills the peak</h2>\n";
    drawBreakdown(*page.ThePlan, page.BudgetBytes, os);
    partsTable(*page.ThePlan, os);
    if (uint64_t host = r.HostPeakBytes())
      os << "<p class=\"note\">Offload: the pinned host pool holds "
         << "<b data-host-bytes=\"" << host << "\">" << formatBytes(host)
         << "</b> (optimizer state and master weights "
         << formatBytes(hostStateBytes(*page.ThePlan, StateKind::Optimizer) +
                        hostStateBytes(*page.ThePlan, StateKind::Param))
         << ", accumulators "
         << formatBytes(hostStateBytes(*page.ThePlan, StateKind::Gradient))
         << ", values in flight " << formatBytes(r.HostArenaBytes)
         << "); per step " << formatBytes(r.ToHostBytes)
         << " go to the host and " << formatBytes(r.ToDeviceBytes)
         << " to the device (docs/offload.md).</p>\n";
    if (r.Ranks > 1)
      os << "<p class=\"note\">Data parallel: <b data-ranks=\"" << r.Ranks
         << "\">" << r.Ranks
         << " ranks</b>, every figure here is one rank's. Its shard of the "
            "state "
         << formatBytes(r.ShardBytes)
         << " (whole: " << formatBytes(r.ShardWholeBytes) << "), replicas "
         << formatBytes(r.ReplicaBytes) << ", the collective library "
         << formatBytes(r.CollectiveLibraryBytes) << "; collectives move "
         << formatBytes(r.CollectiveBytes)
         << " per step per rank (docs/distributed.md).</p>\n";
    if (!page.ThePlan->Adapters.empty()) {
      const Plan &plan = *page.ThePlan;
      os << "<p class=\"note\">LoRA: " << plan.Adapters.size()
         << " adapters of rank "
         << plan.States[plan.stateIndex(plan.Adapters.front().A)].Type.dim(0)
         << " train beside the frozen weights (the parameters above are the "
            "adapters)";
      if (unsigned nf4 = countNf4(plan).Weights)
        os << "; " << nf4
           << " frozen matrices are stored as NF4 (QLoRA), an approximation "
              "of the model's weights";
      os << ".</p>\n";
    }
    os << "<p class=\"note\">Lower bound (the most bytes live at once plus "
          "the constant part): "
       << formatBytes(r.LowerBoundBytes()) << "; FLOPs per step "
       << llvm::format("%.4g", double(r.StepFlops)) << ", recomputed "
       << llvm::format("%.4g", double(r.RecomputeFlops)) << "; "
       << r.PassesPerStep << " forward+backward pass"
       << (r.PassesPerStep == 1 ? "" : "es") << " per step.</p>\n";
    os << "<h2>Over the step</h2>\n";
    drawTimeline(r, "", page.BudgetBytes, os);
    peakTable(r, os);
  }
  if (!page.Candidates.empty()) {
    os << "<h2>What auto-fit tried</h2>\n";
    candidatesTable(page, os);
  }
  if (!page.Sweep.empty()) {
    os << "<h2>Memory against recomputation</h2>\n";
    drawSweep(page.Sweep, "", os);
    sweepTable(page.Sweep, os);
  }
  os << "<p class=\"note\">Every figure is the plan's (headroom report "
        "prints the same numbers as text and --json).</p>\n</body>\n</html>\n";
}
