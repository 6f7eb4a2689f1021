// For libFuzzer targets whose reader takes a path: the input written to a file of this process's
// own, removed (with any SQLite journal beside it) when this goes out of scope.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace fathom {

class FuzzInputFile {
 public:
  // `suffix` is the file name's ending the reader may look at (".json", ".sqlite").
  FuzzInputFile(const uint8_t* data, size_t size, const std::string& suffix)
      : path_((std::filesystem::temp_directory_path() /
               ("fathom-fuzz-" + std::to_string(getpid()) + suffix))
                  .string()) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
      __builtin_trap();  // the fuzzer's own temporary directory is broken, not the reader
    }
  }
  ~FuzzInputFile() {
    for (const char* extra : {"", "-wal", "-shm", "-journal"}) std::remove((path_ + extra).c_str());
  }
  FuzzInputFile(const FuzzInputFile&) = delete;
  FuzzInputFile& operator=(const FuzzInputFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fathom
