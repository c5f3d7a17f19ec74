//===- Report.cpp - Rendering a plan's memory report ----------------------===//
#include "runtime/Report.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>

using namespace headroom;

std::string headroom::formatBytes(uint64_t b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format(u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return os.str();
}

namespace {
struct Row {
  const char *Name;
  uint64_t Bytes;
};
} // namespace

void headroom::printReportTable(const Plan &plan, llvm::StringRef title,
                                llvm::raw_ostream &os) {
  const MemoryReport &r = plan.Report;
  os << "memory report: " << title << "\n";
  os << "  target " << plan.TargetName << " (buffers aligned to "
     << plan.Alignment << " B)\n";
  Row rows[] = {
      {"parameters", r.Parameters},
      {"gradient accumulators", r.GradientState},
      {"gradients", r.Gradients},
      {"optimizer state", r.OptimizerState},
      {"activations (saved for backward)", r.Activations},
      {"temporaries", r.Temporaries},
      {"recomputed (in the backward)", r.Recomputed},
      {"buffers (BatchNorm statistics)", r.Buffers},
      {"frozen weights", r.Frozen},
      {"workspace (kernel scratch)", r.Workspace},
      {"workspace (libraries)", r.LibraryBytes},
      {"alignment padding (state)", r.StatePadding},
  };
  auto line = [&](const char *name, uint64_t bytes) {
    os << llvm::format("  %-34s %18llu B  %12s\n", name,
                       (unsigned long long)bytes, formatBytes(bytes).c_str());
  };
  for (const Row &row : rows)
    line(row.Name, row.Bytes);
  uint64_t frag = r.ArenaBytes - r.transientAtPeak();
  line("fragmentation (arena - live)", frag);
  os << "  " << std::string(70, '-') << "\n";
  line("peak", r.PeakBytes());
  line("lower bound", r.LowerBoundBytes());
  os << llvm::format(
      "  %-34s %20.4f\n", static_cast<const char *>("peak / lower bound"),
      r.LowerBoundBytes() ? double(r.PeakBytes()) / double(r.LowerBoundBytes())
                          : 1.0);
  line("gradients, most live at once", r.GradientsMaxLive);
  line("largest parameter", r.LargestParameter);
  os << llvm::format("  %-34s %20llu\n",
                     static_cast<const char *>("forward+backward passes/step"),
                     (unsigned long long)r.PassesPerStep);
  os << llvm::format("  %-34s %20.4g\n",
                     static_cast<const char *>("FLOPs per step"),
                     double(r.StepFlops));
  os << llvm::format("  %-34s %20.4g  (%.1f%% of the step without them)\n",
                     static_cast<const char *>("FLOPs recomputed"),
                     double(r.RecomputeFlops),
                     r.StepFlops > r.RecomputeFlops
                         ? 100.0 * double(r.RecomputeFlops) /
                               double(r.StepFlops - r.RecomputeFlops)
                         : 0.0);
  os << "  (activations, gradients and temporaries are at the schedule "
        "position where transient memory peaks; \"most live at once\" is "
        "over the whole step; constants in the plan: "
     << formatBytes(r.Constants) << ")\n";
}

void headroom::printReportJson(const Plan &plan, llvm::raw_ostream &os) {
  const MemoryReport &r = plan.Report;
  llvm::json::Object breakdown{
      {"parameters", int64_t(r.Parameters)},
      {"gradient_accumulators", int64_t(r.GradientState)},
      {"gradients", int64_t(r.Gradients)},
      {"optimizer_state", int64_t(r.OptimizerState)},
      {"activations", int64_t(r.Activations)},
      {"workspace", int64_t(r.WorkspaceBytes())},
      {"library_workspace", int64_t(r.LibraryBytes)},
      {"state_padding", int64_t(r.StatePadding)},
      {"temporaries", int64_t(r.Temporaries)},
      {"recomputed", int64_t(r.Recomputed)},
      {"buffers", int64_t(r.Buffers)},
      {"frozen", int64_t(r.Frozen)},
      {"fragmentation", int64_t(r.ArenaBytes - r.transientAtPeak())},
  };
  llvm::json::Object root{
      {"target", plan.TargetName},
      {"alignment_bytes", int64_t(plan.Alignment)},
      {"peak_bytes", int64_t(r.PeakBytes())},
      {"lower_bound_bytes", int64_t(r.LowerBoundBytes())},
      {"arena_bytes", int64_t(r.ArenaBytes)},
      {"constants_bytes", int64_t(r.Constants)},
      {"gradients_max_live_bytes", int64_t(r.GradientsMaxLive)},
      {"largest_parameter_bytes", int64_t(r.LargestParameter)},
      {"passes_per_step", int64_t(r.PassesPerStep)},
      {"step_flops", int64_t(r.StepFlops)},
      {"recompute_flops", int64_t(r.RecomputeFlops)},
      {"breakdown", std::move(breakdown)},
  };
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

void headroom::printReportSvg(const Plan &plan, llvm::StringRef title,
                              llvm::raw_ostream &os) {
  const MemoryReport &r = plan.Report;
  const double W = 960, H = 540, left = 90, right = 230, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  uint64_t state = r.StateBytes();
  // At most ~800 columns: each keeps the busiest point of its calls, so the
  // drawing keeps every peak while staying small for 10^4-call steps.
  std::vector<std::array<uint64_t, 4>> cols;
  size_t per = std::max<size_t>(1, (r.Timeline.size() + 799) / 800);
  auto total = [](const std::array<uint64_t, 4> &t) {
    return t[0] + t[1] + t[2] + t[3];
  };
  for (size_t i = 0; i < r.Timeline.size(); i += per) {
    std::array<uint64_t, 4> best = r.Timeline[i];
    for (size_t j = i; j < std::min(i + per, r.Timeline.size()); ++j)
      if (total(r.Timeline[j]) > total(best))
        best = r.Timeline[j];
    cols.push_back(best);
  }
  size_t n = std::max<size_t>(cols.size(), 1);
  double callsPerColumn = double(per);
  double ymax = double(r.PeakBytes()) * 1.05 + 1;
  auto x = [&](double i) { return left + pw * i / double(n); };
  auto y = [&](double b) { return top + ph - ph * b / ymax; };
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
     << "\" height=\"" << H
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << left << "\" y=\"28\" font-size=\"16\">Memory over the "
     << "training step: " << title << "</text>\n";
  // Layers from the bottom: state, then activations, gradients, temporaries.
  struct Layer {
    const char *Name, *Color;
  };
  const Layer layers[] = {
      {"state (weights, accumulators, optimizer)", "#9e9e9e"},
      {"activations", "#4e79a7"},
      {"gradients", "#e15759"},
      {"temporaries", "#f28e2b"},
      {"recomputed", "#59a14f"}};
  for (int layer = 4; layer >= 0; --layer) {
    // The polygon of the cumulative sum up to this layer.
    os << "<polygon fill=\"" << layers[layer].Color << "\" points=\"";
    os << x(0) << "," << y(0) << " ";
    for (size_t i = 0; i < n; ++i) {
      double sum = double(state);
      if (i < cols.size())
        for (int k = 0; k < layer; ++k)
          sum += double(cols[i][k]);
      if (layer == 0)
        sum = double(state);
      os << x(i) << "," << y(sum) << " " << x(i + 1) << "," << y(sum) << " ";
    }
    os << x(n) << "," << y(0) << "\"/>\n";
  }
  // Peak and lower bound lines.
  auto hline = [&](double b, const char *color, const char *label,
                   double dy = 0) {
    os << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << y(b)
       << "\" y2=\"" << y(b) << "\" stroke=\"" << color
       << "\" stroke-dasharray=\"6,4\"/>\n<text x=\"" << left + pw + 6
       << "\" y=\"" << y(b) + 4 + dy << "\" fill=\"" << color << "\">" << label
       << " " << formatBytes(uint64_t(b)) << "</text>\n";
  };
  hline(double(r.PeakBytes()), "black", "planned peak");
  if (r.LowerBoundBytes() != r.PeakBytes())
    hline(double(r.LowerBoundBytes()), "#555", "lower bound",
          y(double(r.LowerBoundBytes())) - y(double(r.PeakBytes())) < 16 ? 16
                                                                         : 0);
  // Axes with ticks.
  os << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left
     << "\" y2=\"" << top + ph << "\" stroke=\"black\"/>\n"
     << "<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\""
     << left + pw << "\" y2=\"" << top + ph << "\" stroke=\"black\"/>\n";
  for (int t = 0; t <= 5; ++t) {
    double b = ymax * t / 5;
    os << "<text x=\"" << left - 6 << "\" y=\"" << y(b) + 4
       << "\" text-anchor=\"end\">" << formatBytes(uint64_t(b)) << "</text>\n"
       << "<line x1=\"" << left - 3 << "\" x2=\"" << left << "\" y1=\"" << y(b)
       << "\" y2=\"" << y(b) << "\" stroke=\"black\"/>\n";
    double i = double(n) * t / 5;
    os << "<text x=\"" << x(i) << "\" y=\"" << top + ph + 18
       << "\" text-anchor=\"middle\">" << int64_t(i * callsPerColumn)
       << "</text>\n";
  }
  os << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 18
     << "\" text-anchor=\"middle\">kernel call in the step's schedule "
        "(forward, then backward and updates)</text>\n"
     << "<text transform=\"translate(20," << top + ph / 2
     << ") rotate(-90)\" text-anchor=\"middle\">bytes</text>\n";
  // Legend.
  for (int k = 0; k < 5; ++k) {
    double ly = top + 60 + k * 22;
    os << "<rect x=\"" << left + pw + 10 << "\" y=\"" << ly - 11
       << "\" width=\"14\" height=\"14\" fill=\"" << layers[k].Color
       << "\"/>\n<text x=\"" << left + pw + 30 << "\" y=\"" << ly << "\">"
       << layers[k].Name << "</text>\n";
  }
  os << "</svg>\n";
}
