// For tests: an Env over the real one that injects the failures a disk and a process can have.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/env.h"

namespace fathom {

class FaultInjectionEnv : public Env {
 public:
  // Writes fail with "No space left on device" once this many bytes in all have been written.
  std::optional<int64_t> disk_full_after_bytes;
  // Every rename fails.
  bool fail_rename = false;
  // Reads end after this many bytes of each file, as if it were cut short under the reader.
  std::optional<int64_t> short_read_after_bytes;
  // Every command hangs until its time limit.
  bool hang_commands = false;

  Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Result<std::string> RunCommand(const std::string& command, const std::string& flag,
                                 double timeout_s) override;

 private:
  friend class FaultyWritableFile;
  Env* target_ = Env::Default();
  int64_t written_bytes_ = 0;
};

}  // namespace fathom
