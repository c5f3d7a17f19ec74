//===- Report.cpp - Rendering a plan's memory report ----------------------===//
#include "runtime/Report.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

using namespace headroom;

namespace {
struct Row {
  const char *Name;
  uint64_t Bytes;
};
} // namespace

/// The model's tensors by what a step does to them: trained (parameters),
/// updated by the model itself (buffers), kept (frozen), and the plan's
/// constants (lifted scalars and shape tensors among them); each as a
/// count and a number of values. A Constant shared by several functions
/// counts once per function.
struct TensorCounts {
  uint64_t Tensors[4] = {}, Values[4] = {};
};
static const char *const kCountNames[4] = {"trainable", "buffers", "frozen",
                                           "constants"};

static TensorCounts countTensors(const Plan &plan) {
  TensorCounts c;
  for (const PlanState &s : plan.States) {
    int k = s.Kind == StateKind::Param    ? 0
            : s.Kind == StateKind::Buffer ? 1
            : s.Kind == StateKind::Frozen ? 2
                                          : -1;
    if (k < 0)
      continue;
    ++c.Tensors[k];
    c.Values[k] += s.Type.numElements();
  }
  for (const PlanFunction &f : plan.Functions)
    for (const KernelCall &call : f.Calls) {
      if (call.Kind != OpKind::Constant)
        continue;
      auto it = call.Attrs.find("value");
      ++c.Tensors[3];
      if (it != call.Attrs.end())
        c.Values[3] += it->second.asTensor().numElements();
    }
  return c;
}

/// Attention blocks the fuse-attention pass fused, and the Softmaxes it
/// declined by reason (the `fuse_attention` attribute), in the function
/// that has the most (recomputed clones not counted).
struct AttentionCounts {
  unsigned Fused = 0, Unfused = 0;
  std::map<std::string, unsigned> Reasons;
};

static AttentionCounts countAttention(const Plan &plan) {
  AttentionCounts best;
  for (const PlanFunction &f : plan.Functions) {
    AttentionCounts c;
    for (const KernelCall &call : f.Calls) {
      if (call.Attrs.count("recomputed"))
        continue;
      if (call.Kind == OpKind::FusedAttention)
        ++c.Fused;
      auto it = call.Attrs.find("fuse_attention");
      if (call.Kind == OpKind::Softmax && it != call.Attrs.end() &&
          it->second.kind() == Attribute::Kind::String) {
        ++c.Unfused;
        ++c.Reasons[it->second.asString()];
      }
    }
    if (c.Fused + c.Unfused > best.Fused + best.Unfused)
      best = c;
  }
  return best;
}

/// Parameters whose AdamW moments are 8-bit (AdamW8bitUpdate), the bytes of
/// their codes and absmaxes, and the full-precision bytes those replace.
struct Int8State {
  unsigned Parameters = 0;
  uint64_t Bytes = 0, FullBytes = 0;
};

static Int8State countInt8State(const Plan &plan) {
  Int8State s;
  std::set<int> seen; // an update appears once per function that runs it
  for (const PlanFunction &f : plan.Functions)
    for (const KernelCall &call : f.Calls) {
      if (call.Kind != OpKind::AdamW8bitUpdate ||
          !seen.insert(call.State).second)
        continue;
      ++s.Parameters;
      for (int k : call.MoreStates)
        s.Bytes += plan.States[k].Type.sizeInBytes();
      s.FullBytes += 2 * plan.States[call.State].Type.numElements() *
                     uint64_t(sizeof(float));
    }
  return s;
}

/// The timeline's categories, as the report names a value's.
static const char *const kCategoryNames[4] = {"activation", "gradient",
                                              "temporary", "recomputed"};

/// Where transient memory peaks and the largest values live there.
static void printPeakValues(const MemoryReport &r, llvm::raw_ostream &os) {
  if (r.PeakValues.empty())
    return;
  os << "  transient memory peaks after " << r.PeakOp;
  if (!r.PeakLoc.empty())
    os << " at " << r.PeakLoc;
  os << "; the largest values live there:\n";
  for (size_t i = 0; i < r.PeakValues.size() && i < 5; ++i) {
    const PeakValue &v = r.PeakValues[i];
    os << llvm::format("    %12s  %-10s  ", formatBytes(v.Bytes).c_str(),
                       kCategoryNames[v.Category & 3]);
    if (!v.Name.empty())
      os << "%" << v.Name << " = ";
    os << v.Op;
    if (!v.Loc.empty())
      os << " at " << v.Loc;
    os << "\n";
  }
}

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
  line("activations kept at the loss", r.SavedActivations);
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
  TensorCounts counts = countTensors(plan);
  os << "  tensors:";
  for (int k = 0; k < 4; ++k)
    os << (k ? ", " : " ") << counts.Tensors[k] << " " << kCountNames[k] << " ("
       << counts.Values[k] << " values)";
  os << "\n";
  AttentionCounts attention = countAttention(plan);
  if (attention.Fused + attention.Unfused) {
    os << "  attention: " << attention.Fused
       << " fused (no [seq, seq] tensors), " << attention.Unfused << " unfused";
    for (const auto &[why, n] : attention.Reasons)
      os << "; " << n << "x " << why;
    os << "\n";
  }
  Int8State int8 = countInt8State(plan);
  if (int8.Parameters)
    os << "  optimizer state: 8-bit moments for " << int8.Parameters
       << " parameters (" << formatBytes(int8.Bytes) << " for "
       << formatBytes(int8.FullBytes)
       << " in f32; bitsandbytes' block-wise quantization, an approximation "
          "of AdamW)\n";
  printPeakValues(r, os);
  os << "  (activations, gradients and temporaries are at the schedule "
        "position where transient memory peaks; \"most live at once\" is "
        "over the whole step; constants in the plan: "
     << formatBytes(r.Constants) << ")\n";
}

void headroom::printReportJson(const Plan &plan, llvm::raw_ostream &os) {
  os << llvm::formatv("{0:2}", reportJson(plan)) << "\n";
}

llvm::json::Value headroom::reportJson(const Plan &plan) {
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
      {"saved_activations_bytes", int64_t(r.SavedActivations)},
      {"step_flops", int64_t(r.StepFlops)},
      {"recompute_flops", int64_t(r.RecomputeFlops)},
      {"breakdown", std::move(breakdown)},
  };
  llvm::json::Array peakValues;
  for (const PeakValue &v : r.PeakValues)
    peakValues.push_back(
        llvm::json::Object{{"name", v.Name},
                           {"op", v.Op},
                           {"loc", v.Loc},
                           {"bytes", int64_t(v.Bytes)},
                           {"category", kCategoryNames[v.Category & 3]}});
  root["peak"] = llvm::json::Object{{"position", r.PeakPosition},
                                    {"op", r.PeakOp},
                                    {"loc", r.PeakLoc},
                                    {"values", std::move(peakValues)}};
  TensorCounts counts = countTensors(plan);
  llvm::json::Object tensors;
  for (int k = 0; k < 4; ++k)
    tensors[kCountNames[k]] =
        llvm::json::Object{{"tensors", int64_t(counts.Tensors[k])},
                           {"values", int64_t(counts.Values[k])}};
  root["tensors"] = std::move(tensors);
  AttentionCounts attention = countAttention(plan);
  llvm::json::Object declined;
  for (const auto &[why, n] : attention.Reasons)
    declined[why] = int64_t(n);
  root["attention"] =
      llvm::json::Object{{"fused", int64_t(attention.Fused)},
                         {"unfused", int64_t(attention.Unfused)},
                         {"declined", std::move(declined)}};
  Int8State int8 = countInt8State(plan);
  root["int8_optimizer_state"] =
      llvm::json::Object{{"parameters", int64_t(int8.Parameters)},
                         {"bytes", int64_t(int8.Bytes)},
                         {"f32_bytes", int64_t(int8.FullBytes)},
                         {"approximate", int8.Parameters > 0}};
  return llvm::json::Value(std::move(root));
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

/// Recomputed FLOPs as a share of the step without them.
static double extraFlops(const MemoryReport &r) {
  return r.StepFlops > r.RecomputeFlops
             ? double(r.RecomputeFlops) / double(r.StepFlops - r.RecomputeFlops)
             : 0.0;
}

std::vector<bool> headroom::frontierOf(llvm::ArrayRef<SweepPoint> points) {
  std::vector<bool> out(points.size(), true);
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t j = 0; j < points.size(); ++j) {
      const MemoryReport &a = *points[i].Report, &b = *points[j].Report;
      if (b.PeakBytes() <= a.PeakBytes() &&
          b.RecomputeFlops <= a.RecomputeFlops &&
          (b.PeakBytes() < a.PeakBytes() ||
           b.RecomputeFlops < a.RecomputeFlops))
        out[i] = false;
    }
  return out;
}

void headroom::printSweepTable(llvm::ArrayRef<SweepPoint> points,
                               llvm::StringRef title, llvm::raw_ostream &os) {
  os << "recomputation: " << title << "\n";
  os << "  policy                                               peak "
        "kept at the loss   lower bound   FLOPs +\n";
  std::vector<bool> frontier = frontierOf(points);
  for (size_t i = 0; i < points.size(); ++i) {
    const MemoryReport &r = *points[i].Report;
    os << llvm::format(
        "%c %-44s %12s %16s %13s %8.1f%%\n", frontier[i] ? '*' : ' ',
        points[i].Label.c_str(), formatBytes(r.PeakBytes()).c_str(),
        formatBytes(r.SavedActivations).c_str(),
        formatBytes(r.LowerBoundBytes()).c_str(), 100 * extraFlops(r));
  }
  os << "  (* on the frontier: no policy has both a lower peak and fewer "
        "recomputed FLOPs; FLOPs + is recomputed FLOPs over the step without "
        "them; kept at the loss: the forward values the backward reads)\n";
}

void headroom::printSweepJson(llvm::ArrayRef<SweepPoint> points,
                              llvm::raw_ostream &os) {
  std::vector<bool> frontier = frontierOf(points);
  llvm::json::Array rows;
  for (size_t i = 0; i < points.size(); ++i) {
    const MemoryReport &r = *points[i].Report;
    rows.push_back(llvm::json::Object{
        {"policy", points[i].Label},
        {"peak_bytes", int64_t(r.PeakBytes())},
        {"saved_activations_bytes", int64_t(r.SavedActivations)},
        {"recomputed", int64_t(r.Recomputed)},
        {"saved_activations_bytes", int64_t(r.SavedActivations)},
        {"step_flops", int64_t(r.StepFlops)},
        {"recompute_flops", int64_t(r.RecomputeFlops)},
        {"frontier", bool(frontier[i])},
    });
  }
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(rows))) << "\n";
}

void headroom::printSweepSvg(llvm::ArrayRef<SweepPoint> points,
                             llvm::StringRef title, llvm::raw_ostream &os) {
  const double W = 960, H = 540, left = 90, right = 260, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  uint64_t ymaxBytes = 1;
  double xmax = 0.01;
  for (const SweepPoint &p : points) {
    ymaxBytes = std::max(ymaxBytes, p.Report->PeakBytes());
    xmax = std::max(xmax, extraFlops(*p.Report));
  }
  double ymax = double(ymaxBytes) * 1.05, xm = xmax * 1.1;
  auto x = [&](double f) { return left + pw * f / xm; };
  auto y = [&](double b) { return top + ph - ph * b / ymax; };
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
     << "\" height=\"" << H
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << left << "\" y=\"28\" font-size=\"16\">Peak memory "
     << "over recomputed FLOPs: " << title << "</text>\n";
  // The frontier, by extra FLOPs.
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
    os << x(extraFlops(*points[i].Report)) << ","
       << y(double(points[i].Report->PeakBytes())) << " ";
  os << "\"/>\n";
  for (size_t i = 0; i < points.size(); ++i) {
    double px = x(extraFlops(*points[i].Report)),
           py = y(double(points[i].Report->PeakBytes()));
    os << "<circle cx=\"" << px << "\" cy=\"" << py << "\" r=\"4\" fill=\""
       << (frontier[i] ? "#4e79a7" : "#bbbbbb") << "\"><title>"
       << points[i].Label << ": " << formatBytes(points[i].Report->PeakBytes())
       << "</title></circle>\n";
    if (frontier[i])
      os << "<text x=\"" << px + 7 << "\" y=\"" << py - 5 << "\">"
         << points[i].Label << "</text>\n";
  }
  os << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left
     << "\" y2=\"" << top + ph << "\" stroke=\"black\"/>\n"
     << "<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\""
     << left + pw << "\" y2=\"" << top + ph << "\" stroke=\"black\"/>\n";
  for (int t = 0; t <= 5; ++t) {
    double b = ymax * t / 5, f = xm * t / 5;
    os << "<text x=\"" << left - 6 << "\" y=\"" << y(b) + 4
       << "\" text-anchor=\"end\">" << formatBytes(uint64_t(b)) << "</text>\n"
       << "<text x=\"" << x(f) << "\" y=\"" << top + ph + 18
       << "\" text-anchor=\"middle\">" << llvm::format("%.0f%%", 100 * f)
       << "</text>\n";
  }
  os << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 18
     << "\" text-anchor=\"middle\">recomputed FLOPs over the step without "
        "them</text>\n"
     << "<text transform=\"translate(20," << top + ph / 2
     << ") rotate(-90)\" text-anchor=\"middle\">planned peak</text>\n"
     << "</svg>\n";
}
