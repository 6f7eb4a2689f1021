#include <catch2/catch.hpp>
#include <filesystem>

#include "base/fault_injection_env.h"
#include "base/files.h"
#include "base/line_reader.h"

namespace fathom {
namespace {

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// A path in the test folder holding `content`, or nothing when `content` is empty.
std::string TestPath(const std::string& name, const std::string& content = "") {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::filesystem::remove(path);
  if (!content.empty()) REQUIRE(WriteFileAtomic(path, content).ok());
  return path;
}

}  // namespace

TEST_CASE(
    "WriteFileAtomic: a full disk names the file and the write, and leaves the old file whole",
    "[base]") {
  FaultInjectionEnv env;
  env.disk_full_after_bytes = 10;
  const std::string path = TestPath("fathom_env_full.json", "old");
  const Status s = WriteFileAtomic(path, std::string(100, 'x'), &env);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(Contains(s, path));
  CHECK(Contains(s, "write failed: No space left on device"));
  CHECK(*ReadFile(path) == "old");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

TEST_CASE("Env: a real full disk (/dev/full) fails the write with the system's reason", "[base]") {
  auto file = Env::Default()->NewWritableFile("/dev/full");
  REQUIRE(file.ok());
  Status s = (*file)->Append(std::string(1 << 20, 'x'));
  if (s.ok()) s = (*file)->Close();  // buffered: the error may come with the flush
  CHECK(s.message().rfind("/dev/full: write failed: No space left on device", 0) == 0);
}

TEST_CASE("WriteFileAtomic: a failed rename names the file and the move, and leaves nothing behind",
          "[base]") {
  FaultInjectionEnv env;
  env.fail_rename = true;
  const std::string path = TestPath("fathom_env_rename.json");
  const Status s = WriteFileAtomic(path, "{}", &env);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(Contains(s, path + ": cannot move the finished file into place"));
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("WriteFileAtomic: a folder that does not exist names the file and the open", "[base]") {
  const Status s = WriteFileAtomic("/nonexistent/fathom.json", "{}");
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(Contains(
      s, "/nonexistent/fathom.json.tmp: cannot open for writing: No such file or directory"));
}

TEST_CASE("OutputFile: a full disk mid-stream fails the commit; an uncommitted file leaves nothing",
          "[base]") {
  FaultInjectionEnv env;
  env.disk_full_after_bytes = 1000;
  const std::string path = TestPath("fathom_env_stream.csv");
  {
    auto out = OutputFile::Create(path, &env);
    REQUIRE(out.ok());
    for (int i = 0; i < 200; ++i) (*out)->Printf("%d,%d\n", i, i * i);
    const Status s = (*out)->Commit();
    CHECK(Contains(s, "write failed: No space left on device"));
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  {
    auto out = OutputFile::Create(path);
    REQUIRE(out.ok());
    (*out)->Append("half");
    CHECK(std::filesystem::exists(path + ".tmp"));
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  auto out = OutputFile::Create(path);
  REQUIRE(out.ok());
  (*out)->Printf("%s %s\n", std::string(600, 'a').c_str(), "end");  // longer than Printf's buffer
  REQUIRE((*out)->Commit().ok());
  CHECK(*ReadFile(path) == std::string(600, 'a') + " end\n");
  std::filesystem::remove(path);
}

TEST_CASE("ReadFile: a short read is an IoError naming the file, never a shorter file", "[base]") {
  FaultInjectionEnv env;
  env.short_read_after_bytes = 5;
  const std::string path = TestPath("fathom_env_short.json", R"({"a": 1})");
  auto r = ReadFile(path, &env);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kIoError);
  CHECK(r.status().message() == path + ": short read: got 5 of 8 bytes");
  CHECK(*ReadFile(path) == R"({"a": 1})");
  std::filesystem::remove(path);
}

TEST_CASE("LineReader: a short read ends the lines with an IoError naming the file", "[base]") {
  FaultInjectionEnv env;
  env.short_read_after_bytes = 6;
  const std::string path = TestPath("fathom_env_short_lines.txt", "a,b\r\nc,d\ne,f\n");
  auto lines = LineReader::Open(path, &env);
  REQUIRE(lines.ok());
  std::string_view line;
  REQUIRE((*lines)->Next(&line));
  CHECK(line == "a,b");
  CHECK_FALSE((*lines)->Next(&line));  // "c," was cut off: never returned as a line
  CHECK((*lines)->status().code() == StatusCode::kIoError);
  CHECK((*lines)->status().message() == path + ": short read: got 6 of 13 bytes");

  auto whole = LineReader::Open(path, Env::Default());
  REQUIRE(whole.ok());
  int n = 0;
  while ((*whole)->Next(&line)) ++n;
  CHECK(n == 3);
  CHECK((*whole)->status().ok());
  CHECK_FALSE(LineReader::Open(path + ".none").ok());
  std::filesystem::remove(path);
}

TEST_CASE("NewMemoryFile: reads the bytes it was given, then the end", "[base]") {
  const std::string data = "one\ntwo";
  LineReader lines(NewMemoryFile(data), "memory");
  std::string_view line;
  REQUIRE(lines.Next(&line));
  CHECK(line == "one");
  REQUIRE(lines.Next(&line));
  CHECK(line == "two");
  CHECK_FALSE(lines.Next(&line));
  CHECK(lines.status().ok());
}

TEST_CASE("Env::RunCommand: a command that hangs is killed at its time limit, naming the flag",
          "[base]") {
  FaultInjectionEnv env;
  env.hang_commands = true;
  auto r = env.RunCommand("echo 1", "--metrics-cmd", 0.2);
  REQUIRE_FALSE(r.ok());
  CHECK(Contains(r.status(), "--metrics-cmd = "));
  CHECK(Contains(r.status(), "did not finish within 0.2 s"));
}

}  // namespace fathom
