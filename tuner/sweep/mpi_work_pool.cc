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

#include "base/cancel.h"
#include "base/check.h"

namespace fathom::tuner::internal {
namespace {

enum Tag : int {
  kReady = 1,  // worker -> 0: free for a unit (first message)
  kUnit,       // 0 -> worker: "<id>\n<assignment>"
  kStop,       // 0 -> worker: no more batches
  kDone,       // worker -> 0: the unit's result; free for the next
  kError,      // worker -> 0: "<status code>\n<message>"; free for the next
  kDrop,       // 0 -> worker: "<id>": stop computing that unit (its result is no longer wanted)
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
  MpiWorkPool(int rank, int size) : rank_(rank), size_(size), current_(size) {}
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

  Status Run(const WorkHandlers& h) override {
    if (rank_ == 0) return Coordinate(h);
    FATHOM_CHECK(!served_);
    served_ = true;
    return Serve(h);
  }

 private:
  // One batch: free workers take the next unit; those left free when none is ready wait for one,
  // or for the next batch. The first batch starts once every worker said it is ready.
  Status Coordinate(const WorkHandlers& h) {
    for (; ready_ < size_ - 1; ++ready_) {
      const Message m = ReceiveAny();
      FATHOM_CHECK(m.tag == kReady);
      free_.push_back(m.source);
    }
    Status failure;
    auto record = [&](const Status& s) {
      if (!s.ok() && failure.ok()) failure = s;
    };
    int busy = 0;
    std::vector<bool> computing(size_, false), dropped(size_, false);
    // Hands free ranks the units that are ready (none after an error).
    auto dispatch = [&] {
      while (failure.ok() && !free_.empty()) {
        auto unit = h.next();
        record(unit.status());
        if (!unit.ok() || !*unit) return;
        const int rank = free_.back();
        free_.pop_back();
        current_[rank] = **unit;
        computing[rank] = true;
        ++busy;
        Send(rank, kUnit, std::to_string((*unit)->id) + "\n" + (*unit)->assignment);
      }
    };
    dispatch();
    while (busy > 0) {
      const Message m = ReceiveAny();
      FATHOM_CHECK(m.tag == kDone || m.tag == kError);
      --busy;
      computing[m.source] = false;
      if (dropped[m.source]) {
        dropped[m.source] = false;  // whatever came back is dropped with the unit
      } else if (m.tag == kDone) {
        record(h.finish(current_[m.source], m.text));
        for (int r = 1; h.drop && r < size_; ++r) {
          if (computing[r] && !dropped[r] && h.drop(current_[r])) {
            dropped[r] = true;
            Send(r, kDrop, std::to_string(current_[r].id));
          }
        }
      } else {
        record(DecodeError(m.text));
      }
      free_.push_back(m.source);
      dispatch();
    }
    return failure;
  }

  Status Serve(const WorkHandlers& h) {
    Send(0, kReady, "");
    for (;;) {
      const Message m = ReceiveFromCoordinator();
      if (m.tag == kStop) return Status::Ok();
      if (m.tag == kDrop) continue;  // for a unit that ended before the message came
      FATHOM_CHECK(m.tag == kUnit);
      const size_t nl = m.text.find('\n');
      const WorkUnit unit{std::stoll(m.text.substr(0, nl)), m.text.substr(nl + 1)};
      // The coordinator's word that it dropped this unit, polled as the simulations run.
      bool dropped = false;
      CancelCheck check([&] {
        int arrived = 0;
        MPI_Status probed;
        MPI_Iprobe(0, kDrop, MPI_COMM_WORLD, &arrived, &probed);
        if (arrived) dropped = ReceiveProbed(probed).text == std::to_string(unit.id) || dropped;
        return dropped;
      });
      auto result = h.compute(unit);
      if (result.ok()) {
        Send(0, kDone, *result);
      } else {
        Send(0, kError, EncodeError(result.status()));
      }
    }
  }

  int rank_, size_;
  bool served_ = false;
  std::vector<WorkUnit> current_;  // coordinator: the unit each rank computes
  std::vector<int> free_;          // coordinator: ranks waiting for a unit
  int ready_ = 0;                  // coordinator: ranks that said they are ready
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
