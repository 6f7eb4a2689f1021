#include "base/env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/process.h"

namespace fathom {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

class PosixSequentialFile : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd, std::optional<uint64_t> size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixSequentialFile() override { close(fd_); }

  Result<size_t> Read(char* buffer, size_t n) override {
    for (;;) {
      const ssize_t got = read(fd_, buffer, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return Status::IoError(path_ + ": read failed: " + ErrnoText());
    }
  }
  std::optional<uint64_t> size() const override { return size_; }

 private:
  std::string path_;
  int fd_;
  std::optional<uint64_t> size_;
};

class MemoryFile : public SequentialFile {
 public:
  explicit MemoryFile(std::string_view data) : data_(data) {}
  Result<size_t> Read(char* buffer, size_t n) override {
    const size_t got = data_.copy(buffer, n);
    data_.remove_prefix(got);
    return got;
  }
  std::optional<uint64_t> size() const override { return std::nullopt; }

 private:
  std::string_view data_;  // what is left to read
};

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  ~PosixWritableFile() override {
    if (file_ != nullptr) std::fclose(file_);
  }

  Status Append(std::string_view data) override {
    if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
      return Status::IoError(path_ + ": write failed: " + ErrnoText());
    }
    return Status::Ok();
  }
  Status Close() override {
    std::FILE* file = std::exchange(file_, nullptr);
    if (std::fflush(file) != 0) {
      Status failed = Status::IoError(path_ + ": write failed: " + ErrnoText());
      std::fclose(file);
      return failed;
    }
    if (std::fclose(file) != 0) return Status::IoError(path_ + ": write failed: " + ErrnoText());
    return Status::Ok();
  }

 private:
  std::string path_;
  std::FILE* file_;
};

class PosixEnv : public Env {
 public:
  Result<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::NotFound(path + ": cannot open file");
    struct stat st;
    std::optional<uint64_t> size;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) size = static_cast<uint64_t>(st.st_size);
    return std::unique_ptr<SequentialFile>(std::make_unique<PosixSequentialFile>(path, fd, size));
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    std::FILE* file = std::fopen(path.c_str(), "wbe");
    if (file == nullptr) return Status::IoError(path + ": cannot open for writing: " + ErrnoText());
    return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(path, file));
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      return Status::IoError(to + ": cannot move the finished file into place: " + ErrnoText());
    }
    return Status::Ok();
  }
  Status RemoveFile(const std::string& path) override {
    if (std::remove(path.c_str()) != 0)
      return Status::IoError(path + ": cannot remove: " + ErrnoText());
    return Status::Ok();
  }
  Result<std::string> RunCommand(const std::string& command, const std::string& flag,
                                 double timeout_s) override {
    return fathom::RunCommand(command, flag, timeout_s);
  }
};

}  // namespace

std::unique_ptr<SequentialFile> NewMemoryFile(std::string_view data) {
  return std::make_unique<MemoryFile>(data);
}

Status CheckWholeRead(const std::string& path, const SequentialFile& file, uint64_t read_bytes) {
  if (!file.size().has_value() || read_bytes >= *file.size()) return Status::Ok();
  return Status::IoError(path + ": short read: got " + std::to_string(read_bytes) + " of " +
                         std::to_string(*file.size()) + " bytes");
}

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv;
  return env;
}

Result<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path, Env* env) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(path + ".tmp"));
  return std::unique_ptr<OutputFile>(new OutputFile(path, env, std::move(file)));
}

OutputFile::~OutputFile() {
  if (finished_) return;
  file_.reset();
  (void)env_->RemoveFile(TempPath());
}

void OutputFile::Append(std::string_view data) {
  if (status_.ok()) status_ = file_->Append(data);
}

void OutputFile::Printf(const char* format, ...) {
  if (!status_.ok()) return;
  char buffer[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  if (n < static_cast<int>(sizeof buffer)) {
    Append(std::string_view(buffer, static_cast<size_t>(n)));
    return;
  }
  std::string long_line(static_cast<size_t>(n) + 1, '\0');
  va_start(args, format);
  std::vsnprintf(long_line.data(), long_line.size(), format, args);
  va_end(args);
  long_line.pop_back();
  Append(long_line);
}

Status OutputFile::Commit() {
  FATHOM_CHECK(!finished_);
  finished_ = true;
  if (status_.ok()) status_ = file_->Close();
  file_.reset();
  if (status_.ok()) status_ = env_->RenameFile(TempPath(), path_);
  if (!status_.ok()) (void)env_->RemoveFile(TempPath());
  return status_;
}

}  // namespace fathom
