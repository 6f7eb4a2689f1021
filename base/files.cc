#include "base/files.h"

#include <cstdlib>

namespace fathom {

Result<std::string> ReadFile(const std::string& path, Env* env) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, env->NewSequentialFile(path));
  std::string content;
  char buffer[1 << 16];
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(size_t n, file->Read(buffer, sizeof buffer));
    if (n == 0) break;
    content.append(buffer, n);
  }
  FATHOM_RETURN_IF_ERROR(CheckWholeRead(path, *file, content.size()));
  return content;
}

Status WriteFileAtomic(const std::string& path, const std::string& content, Env* env) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Create(path, env));
  out->Append(content);
  return out->Commit();
}

std::string DataDir() {
  if (const char* env = std::getenv("FATHOM_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return FATHOM_SOURCE_DIR;
}

}  // namespace fathom
