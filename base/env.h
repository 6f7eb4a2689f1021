// The files and processes fathom touches, behind one interface (as LevelDB's Env): the real
// file system in production, and in tests an Env that injects a full disk, a failed rename, a
// short read or a command that hangs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace fathom {

// A file opened for reading from its start.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to `n` bytes into `buffer` and returns how many; 0 at the end of the file.
  virtual Result<size_t> Read(char* buffer, size_t n) = 0;
  // The file's size when it was opened, if it is a regular file.
  virtual std::optional<uint64_t> size() const = 0;
};

// A file over `data` in memory (borrowed; it must outlive the file), for fuzz targets.
std::unique_ptr<SequentialFile> NewMemoryFile(std::string_view data);

// Ok when `read_bytes` is all of `file` as it was opened, else an IoError naming `path`: the file
// was cut short under the reader.
Status CheckWholeRead(const std::string& path, const SequentialFile& file, uint64_t read_bytes);

// A file opened for writing, empty.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::string_view data) = 0;
  // Flushes and closes it; an error means the file is incomplete.
  virtual Status Close() = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The real file system and processes; never deleted.
  static Env* Default();

  virtual Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) = 0;
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;

  // Runs `command` through /bin/sh with a time limit, as RunCommand in base/process.h does.
  virtual Result<std::string> RunCommand(const std::string& command, const std::string& flag,
                                         double timeout_s) = 0;
};

// An output file written to `path.tmp` and moved into place by Commit(), so a failed run never
// leaves a half-written file behind: a failed Commit(), or destruction without one, removes the
// temporary. Writes do not return errors; the first one is kept and Commit() returns it.
class OutputFile {
 public:
  // Opens `path.tmp` for writing in `env` (borrowed; it must outlive the file).
  static Result<std::unique_ptr<OutputFile>> Create(const std::string& path,
                                                    Env* env = Env::Default());
  ~OutputFile();

  void Append(std::string_view data);
  void Printf(const char* format, ...) __attribute__((format(printf, 2, 3)));
  // Closes the file and moves it into place; called once.
  Status Commit();

 private:
  OutputFile(std::string path, Env* env, std::unique_ptr<WritableFile> file)
      : path_(std::move(path)), env_(env), file_(std::move(file)) {}
  std::string TempPath() const { return path_ + ".tmp"; }

  std::string path_;
  Env* env_;
  std::unique_ptr<WritableFile> file_;  // null once closed
  Status status_;                       // the first error
  bool finished_ = false;               // moved into place, or failed and removed
};

}  // namespace fathom
