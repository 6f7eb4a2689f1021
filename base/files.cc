#include "base/files.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fathom {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open file");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed");
  return buf.str();
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IoError(path + ": cannot open for writing");
    out << content;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::IoError(path + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError(path + ": cannot move the finished file into place");
  }
  return Status::Ok();
}

std::string DataDir() {
  if (const char* env = std::getenv("FATHOM_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return FATHOM_SOURCE_DIR;
}

}  // namespace fathom
