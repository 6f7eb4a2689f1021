// Imports kernel timings that other tools recorded: Nsight Systems SQLite exports and PyTorch
// profiler Chrome-trace JSON.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "models/perf_db.h"

namespace fathom::profiler {

enum class ProfileFormat { kNsysSqlite, kPytorchJson };

// Looks at the file's first bytes: "SQLite format 3" or a JSON object with traceEvents.
Result<ProfileFormat> DetectProfileFormat(const std::string& path);

// Kernel, memcpy and memset records with their enclosing NVTX (or PyTorch user annotation) range.
Result<std::vector<models::KernelRecord>> ReadNsysSqlite(const std::string& path);
Result<std::vector<models::KernelRecord>> ReadPytorchTrace(const std::string& path);

// Detects the format, reads the records and stores them in `db`. Returns how many were stored.
Result<int64_t> ImportProfile(const std::string& path, models::PerfDb& db);

}  // namespace fathom::profiler
