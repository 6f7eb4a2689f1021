// Whole-file reads and all-or-nothing writes, and where fathom's data files live.
#pragma once

#include <string>

#include "base/env.h"
#include "base/status.h"

namespace fathom {

// Reads all of `path`; a regular file that yields fewer bytes than its size is an IoError.
Result<std::string> ReadFile(const std::string& path, Env* env = Env::Default());

// Writes `content` to a temporary file beside `path` and renames it into place, so a failed
// run never leaves a half-written file behind.
Status WriteFileAtomic(const std::string& path, const std::string& content,
                       Env* env = Env::Default());

// The folder holding fathom's data (models/, traces/data/): $FATHOM_DATA_DIR if set, else the
// source tree the binary was built from.
std::string DataDir();

}  // namespace fathom
