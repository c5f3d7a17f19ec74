//===- Checkpoint.cpp - Training that resumes exactly ---------------------===//
#include "runtime/Checkpoint.h"

#include "compiler/AtomicFile.h"
#include "runtime/PlanFile.h"
#include "runtime/checkpoint.pb.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

using namespace headroom;
namespace pb = headroom::checkpointfile;
using llvm::support::endian::read32le;
using llvm::support::endian::read64le;
using llvm::support::endian::write32le;
using llvm::support::endian::write64le;

static constexpr llvm::StringLiteral kMagic = "headroom checkpoint\n";
static constexpr llvm::StringLiteral kEndMark = "hr-end\r\n";
static constexpr uint64_t kPreambleBytes = 64;
static constexpr uint64_t kTrailerBytes = 32;
static constexpr uint64_t kSlotAlignment = 64;
static constexpr uint64_t kChunkBytes = uint64_t(16) << 20;
static constexpr uint64_t kMaxHeaderBytes = uint64_t(1) << 30;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string headroom::checkpointPath(llvm::StringRef dir, CheckpointRank rank,
                                     int64_t step) {
  llvm::SmallString<256> p(dir);
  if (rank.Ranks <= 1)
    llvm::sys::path::append(p, "checkpoint.hrc");
  else
    llvm::sys::path::append(p, "checkpoint.step" + llvm::Twine(step) + ".rank" +
                                   llvm::Twine(rank.Rank) + "-of-" +
                                   llvm::Twine(rank.Ranks) + ".hrc");
  return std::string(p.str());
}

static std::string manifestPath(llvm::StringRef dir) {
  llvm::SmallString<256> p(dir);
  llvm::sys::path::append(p, "checkpoint.hrm");
  return std::string(p.str());
}

llvm::Error headroom::writeCheckpointManifest(llvm::StringRef dir, int64_t step,
                                              unsigned ranks) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(
            llvm::json::Object{{"format", int64_t(kCheckpointFormatVersion)},
                               {"ranks", int64_t(ranks)},
                               {"step", step}})
     << "\n";
  return writeFileAtomically(manifestPath(dir), os.str());
}

/// The ranks and step of `dir`'s manifest; None when there is none.
static llvm::Expected<llvm::Optional<std::pair<unsigned, int64_t>>>
readManifest(llvm::StringRef dir) {
  std::string path = manifestPath(dir);
  if (!llvm::sys::fs::exists(path))
    return llvm::None;
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf)
    return err(path + ": cannot read: " + buf.getError().message());
  auto v = llvm::json::parse((*buf)->getBuffer());
  if (!v)
    return err(path +
               ": not a checkpoint manifest: " + llvm::toString(v.takeError()));
  const llvm::json::Object *o = v->getAsObject();
  auto ranks = o ? o->getInteger("ranks") : llvm::None;
  auto step = o ? o->getInteger("step") : llvm::None;
  if (!ranks || !step || *ranks < 2 || *ranks > (1 << 20) || *step < 0)
    return err(path + ": not a checkpoint manifest (ranks and step)");
  return std::make_pair(unsigned(*ranks), *step);
}

void headroom::removeOtherSteps(llvm::StringRef dir, CheckpointRank rank,
                                int64_t step, bool temporariesOnly) {
  std::error_code ec;
  std::string suffix = ".rank" + std::to_string(rank.Rank) + "-of-" +
                       std::to_string(rank.Ranks) + ".hrc";
  std::string keep =
      llvm::sys::path::filename(checkpointPath(dir, rank, step)).str();
  std::vector<std::string> stale;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    // Other steps' files, and temporaries a killed run left (of any step).
    bool temporary = name.contains(suffix + ".tmp-");
    bool mine = name.startswith("checkpoint.step") &&
                (temporary || (!temporariesOnly && name.endswith(suffix)));
    if (mine && name != keep)
      stale.push_back(it->path());
  }
  for (const std::string &p : stale)
    llvm::sys::fs::remove(p);
}

static llvm::Error writeZeros(AtomicFile &f, uint64_t count) {
  static const char zeros[kSlotAlignment] = {};
  return f.write(llvm::StringRef(zeros, count));
}

llvm::Error headroom::writeCheckpoint(llvm::StringRef dir,
                                      const CheckpointInfo &info,
                                      const Executor &exec,
                                      CheckpointRank rank) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return err(dir + ": cannot create the checkpoint folder: " + ec.message());
  std::string path = checkpointPath(dir, rank, info.Step);
  auto file = AtomicFile::create(path);
  if (!file)
    return file.takeError();

  char preamble[kPreambleBytes] = {};
  std::memcpy(preamble, kMagic.data(), kMagic.size());
  write32le(preamble + kMagic.size(), kCheckpointFormatVersion);
  if (auto e = file->write(llvm::StringRef(preamble, sizeof(preamble))))
    return e;

  pb::Checkpoint header;
  header.set_plan_sha256(info.PlanSha256);
  header.set_model_path(info.ModelPath);
  header.set_model_sha256(info.ModelSha256);
  header.set_step(info.Step);
  header.set_random_step(info.RandomStep);
  header.set_seed(info.Seed);
  header.set_shuffle(info.Shuffle);
  header.set_data_samples(info.DataSamples);
  header.set_data_path(info.DataPath);
  header.set_chunk_bytes(kChunkBytes);

  const Plan &plan = exec.plan();
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < plan.States.size(); ++i) {
    const PlanState &s = plan.States[i];
    uint64_t pad =
        (kSlotAlignment - file->size() % kSlotAlignment) % kSlotAlignment;
    if (auto e = writeZeros(*file, pad))
      return e;
    pb::Slot *slot = header.add_slots();
    slot->set_name(s.Name);
    slot->set_type(s.Type.str());
    slot->set_offset(file->size());
    uint64_t bytes = s.Type.sizeInBytes();
    slot->set_bytes(bytes);
    buffer.resize(std::min(bytes, kChunkBytes));
    for (uint64_t at = 0; at < bytes; at += kChunkBytes) {
      llvm::MutableArrayRef<uint8_t> chunk(buffer.data(),
                                           std::min(kChunkBytes, bytes - at));
      if (auto e = exec.readStateBytes(i, at, chunk))
        return e;
      slot->add_chunk_xxhash64(llvm::xxHash64(chunk));
      if (auto e = file->write(llvm::toStringRef(chunk)))
        return e;
    }
  }

  std::string headerBytes;
  if (!header.SerializeToString(&headerBytes))
    return err(path + ": the checkpoint header does not serialize");
  uint64_t headerOffset = file->size();
  if (auto e = file->write(headerBytes))
    return e;
  char trailer[kTrailerBytes];
  write64le(trailer, headerOffset);
  write64le(trailer + 8, headerBytes.size());
  write64le(trailer + 16, llvm::xxHash64(headerBytes));
  std::memcpy(trailer + 24, kEndMark.data(), kEndMark.size());
  if (auto e = file->write(llvm::StringRef(trailer, sizeof(trailer))))
    return e;
  return file->commit();
}

llvm::Expected<ParsedCheckpoint>
headroom::parseCheckpoint(llvm::StringRef bytes, llvm::StringRef name) {
  auto bad = [&](const llvm::Twine &why) { return err(name + ": " + why); };
  if (bytes.size() < kPreambleBytes || !bytes.startswith(kMagic))
    return bad("not a headroom checkpoint");
  uint32_t version = read32le(bytes.data() + kMagic.size());
  if (version != kCheckpointFormatVersion)
    return bad("checkpoint format version " + llvm::Twine(version) +
               "; this headroom reads version " +
               llvm::Twine(kCheckpointFormatVersion));
  if (bytes.size() < kPreambleBytes + kTrailerBytes ||
      !bytes.endswith(kEndMark))
    return bad("truncated (no end mark): the write that made it did not "
               "finish");
  // Every byte is checked, the padding too: it must be zero.
  auto zeros = [&](uint64_t from, uint64_t to) {
    return llvm::all_of(bytes.slice(from, to), [](char c) { return c == 0; });
  };
  if (!zeros(kMagic.size() + 4, kPreambleBytes))
    return bad("corrupt: the preamble's padding is not zero");
  const char *trailer = bytes.end() - kTrailerBytes;
  uint64_t headerOffset = read64le(trailer);
  uint64_t headerBytes = read64le(trailer + 8);
  uint64_t dataEnd = bytes.size() - kTrailerBytes;
  if (headerOffset < kPreambleBytes || headerOffset > dataEnd ||
      headerBytes != dataEnd - headerOffset || headerBytes > kMaxHeaderBytes)
    return bad("corrupt: the trailer does not match the file's size");
  llvm::StringRef headerData = bytes.substr(headerOffset, headerBytes);
  if (llvm::xxHash64(headerData) != read64le(trailer + 16))
    return bad("corrupt: the header's hash does not match");
  pb::Checkpoint header;
  if (!header.ParseFromArray(headerData.data(), int(headerData.size())))
    return bad("corrupt: the header does not parse");

  ParsedCheckpoint out;
  CheckpointInfo &info = out.Info;
  info.PlanSha256 = header.plan_sha256();
  info.ModelPath = header.model_path();
  info.ModelSha256 = header.model_sha256();
  info.Step = header.step();
  info.RandomStep = header.random_step();
  info.Seed = header.seed();
  info.Shuffle = header.shuffle();
  info.DataSamples = header.data_samples();
  info.DataPath = header.data_path();
  if (info.Step < 0 || info.Shuffle < -1 || info.DataSamples < 0)
    return bad("corrupt: step " + llvm::Twine(info.Step) + ", shuffle " +
               llvm::Twine(info.Shuffle) + ", samples " +
               llvm::Twine(info.DataSamples));
  uint64_t chunk = header.chunk_bytes();
  if (chunk < 4096 || chunk > (uint64_t(1) << 30))
    return bad("corrupt: chunk size " + llvm::Twine(chunk));

  uint64_t end = kPreambleBytes; // where the previous slot ended
  for (const pb::Slot &s : header.slots()) {
    std::string what = "slot '" + s.name() + "'";
    uint64_t offset = s.offset(), size = s.bytes();
    if (s.name().empty() || offset % kSlotAlignment != 0 || offset < end ||
        offset > headerOffset || size > headerOffset - offset)
      return bad("corrupt: " + what +
                 " lies outside the state region or "
                 "overlaps another");
    if (!zeros(end, offset))
      return bad("corrupt: the padding before " + what + " is not zero");
    uint64_t chunks = size / chunk + (size % chunk != 0);
    if (uint64_t(s.chunk_xxhash64_size()) != chunks)
      return bad("corrupt: " + what + " has " +
                 llvm::Twine(s.chunk_xxhash64_size()) + " chunk hashes for " +
                 llvm::Twine(chunks) + " chunks");
    llvm::StringRef data = bytes.substr(offset, size);
    for (uint64_t c = 0; c < chunks; ++c)
      if (llvm::xxHash64(data.substr(c * chunk, chunk)) !=
          s.chunk_xxhash64(int(c)))
        return bad("corrupt: " + what + " bytes [" + llvm::Twine(c * chunk) +
                   ", " + llvm::Twine(std::min(size, (c + 1) * chunk)) +
                   ") do not match their hash");
    out.Slots.push_back({s.name(), s.type(), data});
    end = offset + size;
  }
  if (!zeros(end, headerOffset))
    return bad("corrupt: the bytes before the header are not zero");
  return out;
}

llvm::Expected<LoadedCheckpoint> headroom::readCheckpoint(llvm::StringRef dir,
                                                          CheckpointRank rank) {
  auto manifest = readManifest(dir);
  if (!manifest)
    return manifest.takeError();
  bool single = llvm::sys::fs::exists(checkpointPath(dir));
  if (!*manifest && !single && rank.Ranks > 1)
    return err(dir + ": no checkpoint here (" + manifestPath(dir) +
               " does not exist)");
  unsigned written = *manifest ? (*manifest)->first : 1;
  if (written != rank.Ranks && (*manifest || single))
    return err("cannot resume from " + dir +
               ": its checkpoint was written by " + llvm::Twine(written) +
               (written == 1 ? " process" : " ranks") + " and this run has " +
               llvm::Twine(rank.Ranks) +
               " (resuming on another number of ranks is not supported)");
  std::string path =
      checkpointPath(dir, rank, *manifest ? (*manifest)->second : 0);
  if (!llvm::sys::fs::exists(path))
    return err(dir + ": no checkpoint here (" + path + " does not exist)");
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return err(path + ": cannot read: " + buf.getError().message());
  LoadedCheckpoint out;
  out.File = std::move(*buf);
  auto parsed = parseCheckpoint(out.File->getBuffer(), path);
  if (!parsed)
    return parsed.takeError();
  out.Parsed = std::move(*parsed);
  return out;
}

static std::string shortHash(const std::string &h) { return h.substr(0, 12); }

llvm::Error headroom::checkResumable(const CheckpointInfo &saved,
                                     const CheckpointInfo &now,
                                     llvm::StringRef dir) {
  std::string from = "cannot resume from " + checkpointPath(dir) + ": ";
  if (saved.ModelSha256 != now.ModelSha256)
    return err(from + "it was written training " + saved.ModelPath +
               " (sha256 " + shortHash(saved.ModelSha256) + "), not " +
               now.ModelPath + " (sha256 " + shortHash(now.ModelSha256) + ")");
  if (saved.PlanSha256 != now.PlanSha256)
    return err(from + "it was written by another plan (fingerprint " +
               shortHash(saved.PlanSha256) + ", this one is " +
               shortHash(now.PlanSha256) +
               "): compile with the flags of the run that wrote it");
  if (saved.DataSamples != now.DataSamples)
    return err(from + "it was written reading " +
               llvm::Twine(saved.DataSamples) + " samples (" + saved.DataPath +
               "); this data has " + llvm::Twine(now.DataSamples));
  if (saved.Seed != now.Seed)
    return err(from + "it was written with --seed " + llvm::Twine(saved.Seed) +
               "; this run has --seed " + llvm::Twine(now.Seed));
  if (saved.Shuffle != now.Shuffle) {
    auto say = [](int64_t s) {
      return s < 0 ? std::string("no --shuffle")
                   : "--shuffle " + std::to_string(s);
    };
    return err(from + "it was written with " + say(saved.Shuffle) +
               "; this run has " + say(now.Shuffle));
  }
  return llvm::Error::success();
}

llvm::Error headroom::restoreState(const ParsedCheckpoint &c, Executor &exec,
                                   llvm::StringRef dir) {
  const Plan &plan = exec.plan();
  std::string from = "cannot resume from " + checkpointPath(dir) + ": ";
  if (c.Slots.size() != plan.States.size())
    return err(from + "it holds " + llvm::Twine(c.Slots.size()) +
               " state slots; the plan has " + llvm::Twine(plan.States.size()));
  for (size_t i = 0; i < c.Slots.size(); ++i) {
    const PlanState &s = plan.States[i];
    std::string type = s.Type.str();
    if (c.Slots[i].Name != s.Name || c.Slots[i].Type != type ||
        c.Slots[i].Bytes.size() != s.Type.sizeInBytes())
      return err(from + "its slot " + llvm::Twine(i) + " is @" +
                 c.Slots[i].Name + " " + c.Slots[i].Type + "; the plan's is @" +
                 s.Name + " " + type);
  }
  for (size_t i = 0; i < c.Slots.size(); ++i)
    if (auto e = exec.writeStateBytes(
            i, 0, llvm::arrayRefFromStringRef(c.Slots[i].Bytes)))
      return e;
  return llvm::Error::success();
}
