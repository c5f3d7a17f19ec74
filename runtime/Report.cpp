//===- Report.cpp - Rendering a plan's memory report ----------------------===//
#include "runtime/Report.h"

#include "compiler/Cost.h"
#include "compiler/Protocol.h"
#include "compiler/StateQuantization.h"

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
    c.Values[k] += (s.ShardOf ? *s.ShardOf : s.Type).numElements();
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
      if (isRecomputed(call.Attrs))
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

Nf4Weights headroom::countNf4(const Plan &plan) {
  Nf4Weights w;
  for (const PlanState &s : plan.States) {
    if (s.Init != StateInit::Nf4)
      continue;
    w.Bytes += s.Type.sizeInBytes();
    if (plan.stateIndex(s.Name + kNf4ScaleSuffixes[0]) >= 0) { // the codes
      ++w.Weights;
      w.Bf16Bytes += 2 * 2 * uint64_t(s.Type.numElements());
    }
  }
  return w;
}

uint64_t headroom::hostStateBytes(const Plan &plan, StateKind k) {
  uint64_t bytes = 0;
  for (const PlanState &s : plan.States)
    if (s.Host && s.Kind == k)
      bytes += s.Type.sizeInBytes();
  return bytes;
}

/// The host pool's lines and the step estimate (cuda plans).
static void printHostAndEstimate(const Plan &plan, llvm::raw_ostream &os) {
  const MemoryReport &r = plan.Report;
  auto line = [&](const char *name, uint64_t bytes) {
    os << llvm::format("    %-32s %18llu B  %12s\n", name,
                       (unsigned long long)bytes, formatBytes(bytes).c_str());
  };
  if (r.HostPeakBytes()) {
    os << "  host pool (pinned host memory; offload):\n";
    line("parameters (master weights)", hostStateBytes(plan, StateKind::Param));
    line("optimizer state", hostStateBytes(plan, StateKind::Optimizer));
    line("gradient accumulators", hostStateBytes(plan, StateKind::Gradient));
    line("values on the host (arena)", r.HostArenaBytes);
    line("workspace (host calls)", r.HostWorkspace);
    line("alignment padding (state)", r.HostStatePadding);
    line("host peak", r.HostPeakBytes());
    os << "  transfers per step: " << formatBytes(r.ToHostBytes)
       << " to the host, " << formatBytes(r.ToDeviceBytes)
       << " to the device\n";
  }
  if (plan.TargetName != "cuda")
    return;
  StepEstimate e = estimateStep(plan);
  if (r.Ranks > 1) {
    double overlapped = e.CollectiveSeconds - e.InOrderCollectiveSeconds;
    os << llvm::format("  step estimate: %.3g s = %.3g s of compute at %.0f "
                       "TFLOP/s (%s, nominal) + %.3g s of collectives in "
                       "order + %.3g s exposed of the copy stream's %.3g s of "
                       "collectives at %.0f GB/s, %.3g s of transfers at %.3g "
                       "GB/s and %.3g s of host calls at %.0f GB/s\n",
                       e.StepSeconds, e.ComputeSeconds, e.FlopsPerSecond / 1e12,
                       e.LowPrecision ? "bf16/fp16" : "f32",
                       e.InOrderCollectiveSeconds, e.ExposedSeconds, overlapped,
                       kLinkBytesPerSecond / 1e9, e.TransferSeconds,
                       r.HostBandwidth / 1e9, e.HostSeconds,
                       kHostBytesPerSecond / 1e9);
    return;
  }
  os << llvm::format("  step estimate: %.3g s = %.3g s of compute at %.0f "
                     "TFLOP/s (%s, nominal) + %.3g s exposed of the copy "
                     "stream's %.3g s of transfers at %.3g GB/s and %.3g s of "
                     "host calls at %.0f GB/s\n",
                     e.StepSeconds, e.ComputeSeconds, e.FlopsPerSecond / 1e12,
                     e.LowPrecision ? "bf16/fp16" : "f32", e.ExposedSeconds,
                     e.TransferSeconds, r.HostBandwidth / 1e9, e.HostSeconds,
                     kHostBytesPerSecond / 1e9);
}

/// Collective volume in units of Psi, the trainable values (the ZeRO
/// paper's: 2 for stages 0-2, 3 for stage 3).
static double collectivePsi(const Plan &plan) {
  uint64_t trainable = 0;
  for (const PlanState &s : plan.States)
    if (s.Kind == StateKind::Param)
      trainable += (s.ShardOf ? *s.ShardOf : s.Type).numElements();
  return trainable ? double(plan.Report.CollectiveElements) / double(trainable)
                   : 0.0;
}

/// The data-parallel block: what is sharded, replicated and moved.
static void printDataParallel(const Plan &plan, llvm::raw_ostream &os) {
  const MemoryReport &r = plan.Report;
  if (r.Ranks <= 1)
    return;
  auto line = [&](const char *name, uint64_t bytes) {
    os << llvm::format("    %-32s %18llu B  %12s\n", name,
                       (unsigned long long)bytes, formatBytes(bytes).c_str());
  };
  os << "  data parallel: " << r.Ranks
     << " ranks (every figure here is one rank's):\n";
  line("sharded state (this rank's)", r.ShardBytes);
  line("  the same state whole", r.ShardWholeBytes);
  line("replicas (gathered weights)", r.ReplicaBytes);
  line("collective library (NCCL)", r.CollectiveLibraryBytes);
  line("collectives per step", r.CollectiveBytes);
  os << llvm::format("    %-32s %20.3f  (x the trainable values; the ZeRO "
                     "paper: 2 for stages 0-2, 3 for stage 3)\n",
                     static_cast<const char *>("collective volume (Psi)"),
                     collectivePsi(plan));
}

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
                       transientName(v.Category));
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
  // On the device; what lives in the host pool is listed below.
  Row rows[] = {
      {"parameters", r.Parameters - hostStateBytes(plan, StateKind::Param)},
      {"gradient accumulators",
       r.GradientState - hostStateBytes(plan, StateKind::Gradient)},
      {"gradients", r.Gradients},
      {"optimizer state",
       r.OptimizerState - hostStateBytes(plan, StateKind::Optimizer)},
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
  printDataParallel(plan, os);
  printHostAndEstimate(plan, os);
  os << llvm::format("  %-34s %20llu\n",
                     static_cast<const char *>("forward+backward passes/step"),
                     (unsigned long long)r.PassesPerStep);
  os << llvm::format("  %-34s %20.4g\n",
                     static_cast<const char *>("FLOPs per step"),
                     double(r.StepFlops));
  os << llvm::format("  %-34s %20.4g  (%.1f%% of the step without them)\n",
                     static_cast<const char *>("FLOPs recomputed"),
                     double(r.RecomputeFlops),
                     100 * extraShare(r.RecomputeFlops, r.StepFlops));
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
  if (!plan.Adapters.empty()) {
    const PlanAdapter &a = plan.Adapters.front();
    int64_t rank = plan.States[plan.stateIndex(a.A)].Type.dim(0);
    os << "  lora: " << plan.Adapters.size() << " adapters of rank " << rank
       << " (alpha " << shortestDecimal(a.Alpha)
       << ") train beside the frozen weights\n";
  }
  Nf4Weights nf4 = countNf4(plan);
  if (nf4.Weights)
    os << "  base weights: " << nf4.Weights << " frozen matrices in NF4 ("
       << formatBytes(nf4.Bytes) << " with their scales, for "
       << formatBytes(nf4.Bf16Bytes)
       << " in bf16; bitsandbytes' 4-bit NormalFloat, an approximation of "
          "the model's weights)\n";
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
  uint64_t hostParams = hostStateBytes(plan, StateKind::Param),
           hostOptimizer = hostStateBytes(plan, StateKind::Optimizer),
           hostAccumulators = hostStateBytes(plan, StateKind::Gradient);
  // On the device (sums to peak_bytes); the host pool's are under "host".
  llvm::json::Object breakdown{
      {"parameters", int64_t(r.Parameters - hostParams)},
      {"gradient_accumulators", int64_t(r.GradientState - hostAccumulators)},
      {"gradients", int64_t(r.Gradients)},
      {"optimizer_state", int64_t(r.OptimizerState - hostOptimizer)},
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
                           {"category", transientName(v.Category)}});
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
  if (!plan.Adapters.empty()) {
    const PlanAdapter &a = plan.Adapters.front();
    root["lora"] = llvm::json::Object{
        {"adapters", int64_t(plan.Adapters.size())},
        {"rank", plan.States[plan.stateIndex(a.A)].Type.dim(0)},
        {"alpha", a.Alpha},
        {"dropout", a.Dropout}};
  }
  root["host"] =
      llvm::json::Object{{"peak_bytes", int64_t(r.HostPeakBytes())},
                         {"parameters", int64_t(hostParams)},
                         {"optimizer_state", int64_t(hostOptimizer)},
                         {"gradient_accumulators", int64_t(hostAccumulators)},
                         {"arena_bytes", int64_t(r.HostArenaBytes)},
                         {"workspace", int64_t(r.HostWorkspace)},
                         {"state_padding", int64_t(r.HostStatePadding)}};
  root["transfers"] =
      llvm::json::Object{{"to_host_bytes", int64_t(r.ToHostBytes)},
                         {"to_device_bytes", int64_t(r.ToDeviceBytes)},
                         {"host_bandwidth_bytes_per_second", r.HostBandwidth}};
  root["data_parallel"] = llvm::json::Object{
      {"ranks", int64_t(r.Ranks)},
      {"shard_bytes", int64_t(r.ShardBytes)},
      {"shard_whole_bytes", int64_t(r.ShardWholeBytes)},
      {"replica_bytes", int64_t(r.ReplicaBytes)},
      {"collective_library_bytes", int64_t(r.CollectiveLibraryBytes)},
      {"collective_bytes", int64_t(r.CollectiveBytes)},
      {"collective_elements", int64_t(r.CollectiveElements)},
      {"collective_psi", collectivePsi(plan)}};
  if (plan.TargetName == "cuda") {
    StepEstimate e = estimateStep(plan);
    root["step_estimate"] = llvm::json::Object{
        {"seconds", e.StepSeconds},
        {"compute_seconds", e.ComputeSeconds},
        {"nominal_flops_per_second", e.FlopsPerSecond},
        {"transfer_seconds", e.TransferSeconds},
        {"host_call_seconds", e.HostSeconds},
        {"exposed_seconds", e.ExposedSeconds},
        {"collective_seconds", e.CollectiveSeconds},
        {"in_order_collective_seconds", e.InOrderCollectiveSeconds},
        {"link_bytes_per_second", kLinkBytesPerSecond}};
  }
  Nf4Weights nf4 = countNf4(plan);
  root["nf4_base_weights"] =
      llvm::json::Object{{"weights", int64_t(nf4.Weights)},
                         {"bytes", int64_t(nf4.Bytes)},
                         {"bf16_bytes", int64_t(nf4.Bf16Bytes)}};
  Int8State int8 = countInt8State(plan);
  root["int8_optimizer_state"] =
      llvm::json::Object{{"parameters", int64_t(int8.Parameters)},
                         {"bytes", int64_t(int8.Bytes)},
                         {"f32_bytes", int64_t(int8.FullBytes)},
                         {"approximate", int8.Parameters > 0}};
  return llvm::json::Value(std::move(root));
}

/// Recomputed FLOPs as a share of the step without them.
static double extraFlops(const MemoryReport &r) {
  return extraShare(r.RecomputeFlops, r.StepFlops);
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
