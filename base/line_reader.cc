#include "base/line_reader.h"

#include <cstring>
#include <utility>

namespace fathom {

constexpr size_t kChunk = 1 << 16;

Result<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path, Env* env) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, env->NewSequentialFile(path));
  return std::make_unique<LineReader>(std::move(file), path);
}

LineReader::LineReader(std::unique_ptr<SequentialFile> file, std::string name)
    : file_(std::move(file)), name_(std::move(name)), buf_(kChunk) {}

bool LineReader::Refill() {
  if (eof_) return false;
  // Keep the unfinished line at the front, grow when one line fills the whole buffer.
  const size_t pending = end_ - begin_;
  if (begin_ > 0) std::memmove(buf_.data(), buf_.data() + begin_, pending);
  begin_ = 0;
  end_ = pending;
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
  Result<size_t> n = file_->Read(buf_.data() + end_, buf_.size() - end_);
  if (!n.ok() || *n == 0) {
    eof_ = true;
    status_ = n.ok() ? CheckWholeRead(name_, *file_, read_bytes_) : n.status();
    return false;
  }
  end_ += *n;
  read_bytes_ += *n;
  return true;
}

bool LineReader::Next(std::string_view* line) {
  while (true) {
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    if (nl != nullptr) {
      size_t len = static_cast<const char*>(nl) - start;
      begin_ += len + 1;
      if (len > 0 && start[len - 1] == '\r') --len;
      *line = std::string_view(start, len);
      ++line_number_;
      return true;
    }
    if (!Refill()) {
      if (begin_ == end_ || !status_.ok()) return false;
      // Last line without a trailing newline.
      size_t len = end_ - begin_;
      const char* s = buf_.data() + begin_;
      begin_ = end_;
      if (len > 0 && s[len - 1] == '\r') --len;
      *line = std::string_view(s, len);
      ++line_number_;
      return true;
    }
  }
}

}  // namespace fathom
