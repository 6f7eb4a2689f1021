// The MPI transport of WorkPool. CMake builds mpi_work_pool.cc where MPI is found
// (FATHOM_WITH_MPI) and mpi_work_pool_unavailable.cc elsewhere.
#pragma once

#include <memory>

#include "base/status.h"
#include "tuner/sweep/work_pool.h"

namespace fathom::tuner::internal {

// The ranks of the MPI job this process was started in; null when it was started by no MPI
// launcher or as the job's only rank. In a build without MPI, a job of several ranks is an
// Unavailable error.
Result<std::unique_ptr<WorkPool>> MakeMpiWorkPool();

// Ranks of the job a launcher (mpirun, srun) started this process in, from its environment; 0
// when none did.
int LaunchedRanks();

}  // namespace fathom::tuner::internal
