//===- AtomicFile.cpp - Files that appear whole or not at all -------------===//
#include "compiler/AtomicFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

using namespace headroom;

static llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

static std::error_code lastError() {
  return std::error_code(errno, std::generic_category());
}

llvm::Expected<AtomicFile> AtomicFile::create(llvm::StringRef path) {
  AtomicFile f;
  f.Path = path.str();
  std::string model = (path + ".tmp-%%%%%%").str();
  if (std::error_code ec =
          llvm::sys::fs::createUniqueFile(model, f.Fd, f.Temporary))
    return err(path +
               ": cannot create a temporary file next to it: " + ec.message());
  return f;
}

AtomicFile::AtomicFile(AtomicFile &&o)
    : Path(std::move(o.Path)), Temporary(std::move(o.Temporary)), Fd(o.Fd),
      Size(o.Size) {
  o.Fd = -1;
  o.Temporary.clear();
}

AtomicFile::~AtomicFile() {
  if (Fd >= 0)
    ::close(Fd);
  if (!Temporary.empty())
    llvm::sys::fs::remove(Temporary);
}

llvm::Error AtomicFile::fail(const llvm::Twine &what, std::error_code ec) {
  if (Fd >= 0)
    ::close(Fd);
  Fd = -1;
  if (!Temporary.empty())
    llvm::sys::fs::remove(Temporary);
  Temporary.clear();
  return err(Path + ": " + what + ": " + ec.message());
}

llvm::Error AtomicFile::write(llvm::StringRef bytes) {
  if (Fd < 0)
    return err(Path + ": write after the file was closed");
  const char *p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(Fd, p, std::min<size_t>(left, size_t(1) << 30));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return fail("write failed",
                  n < 0 ? lastError()
                        : std::make_error_code(std::errc::no_space_on_device));
    p += n;
    left -= size_t(n);
    Size += uint64_t(n);
  }
  return llvm::Error::success();
}

llvm::Error AtomicFile::commit() {
  if (Fd < 0)
    return err(Path + ": commit after the file was closed");
  if (::fsync(Fd) != 0)
    return fail("cannot flush to disk", lastError());
  if (::close(Fd) != 0) {
    Fd = -1;
    return fail("cannot close", lastError());
  }
  Fd = -1;
  if (std::error_code ec = llvm::sys::fs::rename(Temporary, Path))
    return fail("cannot rename the temporary file", ec);
  Temporary.clear();
  // The rename is durable once the folder's entry is on disk.
  llvm::SmallString<256> dir(Path);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  return llvm::Error::success();
}

llvm::Error headroom::writeFileAtomically(llvm::StringRef path,
                                          llvm::StringRef bytes) {
  auto f = AtomicFile::create(path);
  if (!f)
    return f.takeError();
  if (auto e = f->write(bytes))
    return e;
  return f->commit();
}

void headroom::removeStaleTemporaries(llvm::StringRef path) {
  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  std::string prefix = (llvm::sys::path::filename(path) + ".tmp-").str();
  std::error_code ec;
  std::vector<std::string> stale;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::sys::path::filename(it->path()).startswith(prefix))
      stale.push_back(it->path());
  for (const std::string &s : stale)
    llvm::sys::fs::remove(s);
}
