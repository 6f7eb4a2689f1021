#include "base/fault_injection_env.h"

#include <algorithm>

namespace fathom {
namespace {

class ShortSequentialFile : public SequentialFile {
 public:
  ShortSequentialFile(std::unique_ptr<SequentialFile> file, int64_t limit)
      : file_(std::move(file)), left_(limit) {}
  Result<size_t> Read(char* buffer, size_t n) override {
    FATHOM_ASSIGN_OR_RETURN(size_t got,
                            file_->Read(buffer, std::min(n, static_cast<size_t>(left_))));
    left_ -= static_cast<int64_t>(got);
    return got;
  }
  std::optional<uint64_t> size() const override { return file_->size(); }

 private:
  std::unique_ptr<SequentialFile> file_;
  int64_t left_;
};

}  // namespace

class FaultyWritableFile : public WritableFile {
 public:
  FaultyWritableFile(std::string path, std::unique_ptr<WritableFile> file, FaultInjectionEnv* env)
      : path_(std::move(path)), file_(std::move(file)), env_(env) {}
  Status Append(std::string_view data) override {
    if (env_->disk_full_after_bytes.has_value()) {
      const int64_t room =
          std::max<int64_t>(0, *env_->disk_full_after_bytes - env_->written_bytes_);
      if (static_cast<int64_t>(data.size()) > room) {
        // Like a real full disk: what fits is written, then the write fails.
        FATHOM_RETURN_IF_ERROR(file_->Append(data.substr(0, static_cast<size_t>(room))));
        env_->written_bytes_ += room;
        return Status::IoError(path_ + ": write failed: No space left on device");
      }
    }
    env_->written_bytes_ += static_cast<int64_t>(data.size());
    return file_->Append(data);
  }
  Status Close() override { return file_->Close(); }

 private:
  std::string path_;
  std::unique_ptr<WritableFile> file_;
  FaultInjectionEnv* env_;
};

Result<std::unique_ptr<SequentialFile>> FaultInjectionEnv::NewSequentialFile(
    const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, target_->NewSequentialFile(path));
  if (!short_read_after_bytes.has_value()) return file;
  return std::unique_ptr<SequentialFile>(
      std::make_unique<ShortSequentialFile>(std::move(file), *short_read_after_bytes));
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, target_->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(
      std::make_unique<FaultyWritableFile>(path, std::move(file), this));
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  if (fail_rename)
    return Status::IoError(to + ": cannot move the finished file into place: Input/output error");
  return target_->RenameFile(from, to);
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) { return target_->RemoveFile(path); }

Result<std::string> FaultInjectionEnv::RunCommand(const std::string& command,
                                                  const std::string& flag, double timeout_s) {
  return target_->RunCommand(hang_commands ? "sleep 60 # " + command : command, flag, timeout_s);
}

}  // namespace fathom
