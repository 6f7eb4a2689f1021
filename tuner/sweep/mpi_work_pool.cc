// The MPI transport: rank 0 hands out items and receives results; ranks 1.. compute. Messages are
// text (MPI_CHAR), told apart by tag. Rank 0 waits by polling with short sleeps rather than in a
// blocking receive, which Open MPI spins in: on a machine with as many ranks as cores, rank 0
// would otherwise take a core from the ranks that compute.
#include "tuner/sweep/mpi_work_pool.h"

#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"

namespace fathom::tuner::internal {
namespace {

enum Tag : int {
  kReady = 1,  // worker -> 0: free for an item (first message)
  kItem,       // 0 -> worker: "<item>\n<assignment>"
  kStop,       // 0 -> worker: no more batches
  kResult,     // worker -> 0: one result of its item
  kDone,       // worker -> 0: the item's summary; free for the next
  kError,      // worker -> 0: "<status code>\n<message>"; free for the next
};

struct Message {
  int source = 0;
  int tag = 0;
  std::string text;
};

void Send(int to, Tag tag, const std::string& text) {
  MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, to, tag, MPI_COMM_WORLD);
}

Message ReceiveProbed(const MPI_Status& probed) {
  int size = 0;
  MPI_Get_count(&probed, MPI_CHAR, &size);
  Message m{probed.MPI_SOURCE, probed.MPI_TAG, std::string(static_cast<size_t>(size), '\0')};
  MPI_Recv(m.text.data(), size, MPI_CHAR, probed.MPI_SOURCE, probed.MPI_TAG, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  return m;
}

// The next message from any rank, waiting without spinning a core.
Message ReceiveAny() {
  for (;;) {
    int arrived = 0;
    MPI_Status probed;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &arrived, &probed);
    if (arrived) return ReceiveProbed(probed);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Message ReceiveFromCoordinator() {
  MPI_Status probed;
  MPI_Probe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &probed);
  return ReceiveProbed(probed);
}

std::string EncodeError(const Status& s) {
  return std::to_string(static_cast<int>(s.code())) + "\n" + s.message();
}

Status DecodeError(const std::string& text) {
  const size_t nl = text.find('\n');
  const std::string message = text.substr(nl + 1);
  switch (static_cast<StatusCode>(std::stoi(text.substr(0, nl)))) {
    case StatusCode::kNotFound:
      return Status::NotFound(message);
    case StatusCode::kUnavailable:
      return Status::Unavailable(message);
    case StatusCode::kIoError:
      return Status::IoError(message);
    default:
      return Status::InvalidArgument(message);
  }
}

class MpiWorkPool : public WorkPool {
 public:
  MpiWorkPool(int rank, int size) : rank_(rank), size_(size), current_(size, -1) {}
  ~MpiWorkPool() override {
    // Every worker is free (or has not yet said it is ready: a coordinator that returned before
    // Run, on bad input, still releases them).
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) Send(r, kStop, "");
    }
    MPI_Finalize();
  }

  bool coordinator() const override { return rank_ == 0; }
  int workers() const override { return size_ - 1; }
  bool mpi() const override { return true; }

  Status Run(const std::vector<int64_t>& items, const WorkHandlers& h) override {
    if (rank_ == 0) return Coordinate(items, h);
    FATHOM_CHECK(!served_);
    served_ = true;
    return Serve(h);
  }

 private:
  // One batch: free workers (from an earlier batch, or ready for their first item) take the next
  // item; those left free when the batch runs out wait for the next one.
  Status Coordinate(const std::vector<int64_t>& items, const WorkHandlers& h) {
    Status failure;
    auto record = [&](const Status& s) {
      if (!s.ok() && failure.ok()) failure = s;
    };
    size_t next = 0;
    int busy = 0;
    // Hands `rank` the next item, or leaves it free when there is none (or after an error).
    auto dispatch = [&](int rank) {
      while (failure.ok() && next < items.size()) {
        const int64_t item = items[next++];
        auto assignment = h.assign(item);
        record(assignment.status());
        if (!assignment.ok()) break;
        current_[rank] = item;
        ++busy;
        Send(rank, kItem, std::to_string(item) + "\n" + *assignment);
        return;
      }
      free_.push_back(rank);
    };
    std::vector<int> free;
    free.swap(free_);
    for (int rank : free) dispatch(rank);
    while (busy > 0 || (failure.ok() && next < items.size())) {
      const Message m = ReceiveAny();
      const int64_t item = current_[m.source];
      switch (m.tag) {
        case kReady:
          break;
        case kResult:
          record(h.collect(item, m.text));
          continue;  // the item goes on
        case kDone:
          --busy;
          record(h.finish(item, m.text));
          break;
        case kError:
          --busy;
          record(DecodeError(m.text));
          break;
        default:
          FATHOM_CHECK(false);
      }
      dispatch(m.source);
    }
    return failure;
  }

  Status Serve(const WorkHandlers& h) {
    Send(0, kReady, "");
    for (;;) {
      const Message m = ReceiveFromCoordinator();
      if (m.tag == kStop) return Status::Ok();
      FATHOM_CHECK(m.tag == kItem);
      const size_t nl = m.text.find('\n');
      const int64_t item = std::stoll(m.text.substr(0, nl));
      const WorkHandlers::Emit emit = [](const std::string& result) {
        Send(0, kResult, result);
        return Status::Ok();
      };
      auto summary = h.compute(item, m.text.substr(nl + 1), emit);
      if (summary.ok()) {
        Send(0, kDone, *summary);
      } else {
        Send(0, kError, EncodeError(summary.status()));
      }
    }
  }

  int rank_, size_;
  bool served_ = false;
  std::vector<int64_t> current_;  // coordinator: the item each rank computes
  std::vector<int> free_;         // coordinator: ranks waiting for an item
};

}  // namespace

Result<std::unique_ptr<WorkPool>> MakeMpiWorkPool() {
  if (LaunchedRanks() == 0) return std::unique_ptr<WorkPool>();
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) {
    MPI_Finalize();
    return std::unique_ptr<WorkPool>();
  }
  return std::unique_ptr<WorkPool>(std::make_unique<MpiWorkPool>(rank, size));
}

}  // namespace fathom::tuner::internal
