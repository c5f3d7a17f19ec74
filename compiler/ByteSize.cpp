//===- ByteSize.cpp - Byte counts as people write them --------------------===//
#include "compiler/ByteSize.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

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

llvm::Expected<uint64_t> headroom::parseByteSize(llvm::StringRef text) {
  llvm::StringRef t = text.trim();
  size_t digits = t.find_first_not_of("0123456789.");
  llvm::StringRef number = t.take_front(digits),
                  unit = t.drop_front(number.size());
  double value = 0;
  if (number.empty() || number.getAsDouble(value) || value < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "'%s' is not a byte count",
                                   text.str().c_str());
  static const std::pair<const char *, double> units[] = {{"", 1},
                                                          {"B", 1},
                                                          {"K", 1024.0},
                                                          {"KB", 1024.0},
                                                          {"KiB", 1024.0},
                                                          {"M", 1 << 20},
                                                          {"MB", 1 << 20},
                                                          {"MiB", 1 << 20},
                                                          {"G", 1 << 30},
                                                          {"GB", 1 << 30},
                                                          {"GiB", 1 << 30},
                                                          {"T", 1ull << 40},
                                                          {"TB", 1ull << 40},
                                                          {"TiB", 1ull << 40}};
  for (const auto &[name, scale] : units)
    if (unit.trim().equals_insensitive(name)) {
      double bytes = value * scale;
      if (bytes >= 18446744073709551615.0)
        break;
      return static_cast<uint64_t>(bytes);
    }
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "'%s' is not a byte count",
                                 text.str().c_str());
}
