// The MPI transport in a build without MPI: one process runs on threads; a job of several ranks
// would have each write the store, so it is refused.
#include <string>

#include "tuner/sweep/mpi_work_pool.h"

namespace fathom::tuner::internal {

Result<std::unique_ptr<WorkPool>> MakeMpiWorkPool() {
  const int ranks = LaunchedRanks();
  if (ranks > 1) {
    return Status::Unavailable(
        "started as one of " + std::to_string(ranks) +
        " MPI ranks, but this fathom was built without MPI: install libopenmpi-dev and "
        "rebuild with -DFATHOM_WITH_MPI=ON, or run one process (it uses threads)");
  }
  return std::unique_ptr<WorkPool>();
}

}  // namespace fathom::tuner::internal
