//===- MpiCommunicator.cpp - The ranks of an MPI job ----------------------===//
//
// MPI_COMM_WORLD as a Communicator. MPI is initialised on first use and
// finalised at exit; errors come back as return codes (MPI_ERRORS_RETURN),
// so a failed call is an error line naming it. A rank that dies is the
// launcher's to handle: mpirun (and srun) stop every other rank of the job
// and name the one that died.
//
//===----------------------------------------------------------------------===//
#include "runtime/Communicator.h"

// The C API only (not the deprecated C++ bindings mpi.h would pull in).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>

using namespace headroom;

namespace {

llvm::Error mpiError(int code, const char *what) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s: %s", what,
                                 std::string(text, length).c_str());
}

/// MPI's counts and displacements are ints: a shard of 2^31 elements or
/// more is refused by name rather than wrapped.
llvm::Error intCounts(llvm::ArrayRef<int64_t> counts, std::vector<int> &ints,
                      std::vector<int> *displs) {
  int64_t at = 0;
  for (int64_t c : counts) {
    if (c > INT_MAX || at > INT_MAX)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "a collective over %lld elements per rank exceeds MPI's int counts",
          (long long)c);
    ints.push_back(int(c));
    if (displs)
      displs->push_back(int(at));
    at += c;
  }
  return llvm::Error::success();
}

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &Rank);
    MPI_Comm_size(MPI_COMM_WORLD, &Size);
    // The ranks that share this machine's memory, in rank order.
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, Rank,
                            MPI_INFO_NULL, &node) == MPI_SUCCESS) {
      MPI_Comm_rank(node, &Local);
      MPI_Comm_free(&node);
    }
  }
  unsigned rank() const override { return unsigned(Rank); }
  unsigned size() const override { return unsigned(Size); }
  unsigned localRank() const override { return unsigned(Local); }

  llvm::Error reduceScatter(const void *in, void *out,
                            llvm::ArrayRef<int64_t> counts,
                            DType type) override {
    std::vector<int> ints;
    if (auto e = intCounts(counts, ints, nullptr))
      return e;
    MPI_Datatype t = type == DType::F64 ? MPI_DOUBLE : MPI_FLOAT;
    if (int rc = MPI_Reduce_scatter(in, out, ints.data(), t, MPI_SUM,
                                    MPI_COMM_WORLD))
      return mpiError(rc, "MPI_Reduce_scatter");
    return llvm::Error::success();
  }

  llvm::Error allGather(const void *in, void *out,
                        llvm::ArrayRef<int64_t> counts,
                        uint64_t elementBytes) override {
    // Bytes, in elements of elementBytes: a contiguous datatype per element.
    MPI_Datatype element;
    MPI_Type_contiguous(int(elementBytes), MPI_BYTE, &element);
    MPI_Type_commit(&element);
    std::vector<int> ints, displs;
    llvm::Error e = intCounts(counts, ints, &displs);
    if (!e) {
      if (int rc = MPI_Allgatherv(in, ints[Rank], element, out, ints.data(),
                                  displs.data(), element, MPI_COMM_WORLD))
        e = mpiError(rc, "MPI_Allgatherv");
    }
    MPI_Type_free(&element);
    return e;
  }

  llvm::Error broadcast(void *data, uint64_t bytes, unsigned root) override {
    // In pieces of at most 1 GiB (int counts).
    auto *p = static_cast<uint8_t *>(data);
    for (uint64_t at = 0; at < bytes; at += 1u << 30) {
      int n = int(std::min<uint64_t>(bytes - at, 1u << 30));
      if (int rc = MPI_Bcast(p + at, n, MPI_BYTE, int(root), MPI_COMM_WORLD))
        return mpiError(rc, "MPI_Bcast");
    }
    return llvm::Error::success();
  }

  llvm::Expected<std::vector<std::string>>
  allGatherStrings(llvm::StringRef mine) override {
    int length = int(mine.size());
    std::vector<int> lengths(Size), displs(Size);
    if (int rc = MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT,
                               MPI_COMM_WORLD))
      return mpiError(rc, "MPI_Allgather");
    int total = 0;
    for (int r = 0; r < Size; ++r) {
      displs[r] = total;
      total += lengths[r];
    }
    std::string all(size_t(total), '\0');
    if (int rc = MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(),
                                lengths.data(), displs.data(), MPI_CHAR,
                                MPI_COMM_WORLD))
      return mpiError(rc, "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int r = 0; r < Size; ++r)
      out.push_back(all.substr(size_t(displs[r]), size_t(lengths[r])));
    return out;
  }

  llvm::Error barrier() override {
    if (int rc = MPI_Barrier(MPI_COMM_WORLD))
      return mpiError(rc, "MPI_Barrier");
    return llvm::Error::success();
  }

private:
  int Rank = 0, Size = 1, Local = 0;
};

void finalizeAtExit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Finalize();
}

} // namespace

llvm::Expected<Communicator *> headroom::joinMpiWorld() {
  static MpiCommunicator *world = nullptr;
  if (world)
    return world;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (int rc = MPI_Init(nullptr, nullptr))
      return mpiError(rc, "MPI_Init");
    std::atexit(finalizeAtExit);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  world = new MpiCommunicator();
  return world;
}

void headroom::abortRanks(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}
