#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/files.h"
#include "base/format.h"
#include "base/json_fields.h"
#include "base/process.h"
#include "base/sim_time.h"
#include "base/sqlite.h"
#include "base/stats.h"

namespace fathom {

TEST_CASE("JsonFields: a missing field names the source, the field and the type wanted", "[base]") {
  Json obj = Json::parse(R"({"a": 1, "b": "x"})");
  JsonFields f(obj, "cfg.json");
  CHECK(f.Int("a") == 1);
  CHECK(f.String("b") == "x");
  (void)f.Int("c");
  REQUIRE_FALSE(f.status().ok());
  CHECK(f.status().message() == "cfg.json: field 'c': missing (required integer)");
}

TEST_CASE("JsonFields: a value of the wrong type names the value and the rule", "[base]") {
  Json obj = Json::parse(R"({"a": "seven"})");
  JsonFields f(obj, "cfg.json");
  (void)f.Int("a");
  CHECK(f.status().message() == "cfg.json: field 'a' = \"seven\": must be an integer");
}

TEST_CASE("JsonFields: an integer beyond 64 bits is an error, never wrapped or cast", "[base]") {
  // Found by fuzz_deployment: "gpus": 11111111111111111111113456 (a double) cast to int64.
  auto message = [](const std::string& value) {
    Json obj = Json::parse("{\"n\": " + value + "}");
    JsonFields f(obj, "cfg.json");
    (void)f.Int("n");
    return f.status().message();
  };
  CHECK(message("11111111111111111111113456") ==
        "cfg.json: field 'n' = 1.111111111111111e+25: must be an integer within 64 bits (magnitude "
        "below 2^63)");
  CHECK(message("18446744073709551615") ==
        "cfg.json: field 'n' = 18446744073709551615: must be an integer within 64 bits (magnitude "
        "below 2^63)");
  CHECK(message("-9.3e18").find("must be an integer within 64 bits") != std::string::npos);
  CHECK(message("2.5") == "cfg.json: field 'n' = 2.5: must be an integer");
  CHECK(message("9223372036854775807").empty());
  CHECK(message("-9223372036854775808").empty());
  CHECK(message("4e3").empty());
}

TEST_CASE("ReadJsonFile: malformed JSON names the file and the byte", "[base]") {
  const std::string path = (std::filesystem::temp_directory_path() / "fathom_bad.json").string();
  REQUIRE(WriteFileAtomic(path, "{\"a\": 1,,}").ok());
  auto r = ReadJsonFile(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().rfind(path + ": malformed JSON at byte", 0) == 0);
  std::remove(path.c_str());
}

TEST_CASE("ParseJson: a number beyond a double's range is an error naming the source", "[base]") {
  auto r = ParseJson("{\"vocab_size\": 1E8256}", "config.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().rfind("config.json: malformed JSON", 0) == 0);
  CHECK(r.status().message().find("1E8256") != std::string::npos);
}

TEST_CASE("ReadFile: a missing file is NotFound and names the path", "[base]") {
  auto r = ReadFile("/nonexistent/fathom.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kNotFound);
  CHECK(r.status().message().find("/nonexistent/fathom.json") != std::string::npos);
}

TEST_CASE("FormatCount: thousands separators, and no value wider than a table cell", "[base]") {
  CHECK(FormatCount(0) == "0");
  CHECK(FormatCount(999.4) == "999");
  CHECK(FormatCount(2164352.3) == "2,164,352");
  CHECK(FormatCount(-1234) == "-1,234");
  CHECK(FormatCount(-0.2) == "0");
  CHECK(FormatCount(1e300) == "1.0e+300");
  CHECK(FormatCount(std::nan("")) == "nan");
  CHECK(FormatCount(-INFINITY) == "-inf");
}

TEST_CASE("RunCommand: output, exit status, and a command that hangs killed at its time limit",
          "[base]") {
  auto ok = RunCommand("echo hello; echo world", "--cmd", 5);
  REQUIRE(ok.ok());
  CHECK(*ok == "hello\nworld\n");
  auto failed = RunCommand("echo oops; exit 3", "--cmd", 5);
  CHECK(failed.status().message() == "--cmd = \"echo oops; exit 3\": exited with status 3: oops\n");
  const auto start = std::chrono::steady_clock::now();
  // The shell and the sleep it started are both killed: the call returns at the limit.
  auto hung = RunCommand("sleep 30 & sleep 30", "--cmd", 0.3);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(hung.status().message() ==
        "--cmd = \"sleep 30 & sleep 30\": did not finish within 0.3 s (--command-timeout); killed");
  CHECK(took < 5);
}

TEST_CASE(
    "sqlite::Database: a reader never stops a writer, two writers both finish, garbage is named",
    "[base]") {
  using sqlite::Database;
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_sqlite_test.db").string();
  std::filesystem::remove(path);
  auto w = Database::Open(path, Database::Mode::kReadWriteCreate, "test database");
  REQUIRE(w.ok());
  REQUIRE(w->Exec("CREATE TABLE t(x INTEGER)").ok());
  REQUIRE(w->Exec("INSERT INTO t VALUES(1)").ok());
  auto count = [](Database& db) {
    auto st = db.Prepare("SELECT count(*) FROM t");
    REQUIRE(st.ok());
    auto row = st->Step();
    REQUIRE(row.ok());
    return st->Int(0);
  };
  // A reader in the middle of a read transaction (`fathom report` on a running sweep).
  auto r = Database::Open(path, Database::Mode::kReadOnly, "test database");
  REQUIRE(r.ok());
  REQUIRE(r->Exec("BEGIN").ok());
  CHECK(count(*r) == 1);
  CHECK(w->Exec("INSERT INTO t VALUES(2)").ok());  // commits while the reader holds its snapshot
  CHECK(count(*r) == 1);
  REQUIRE(r->Exec("COMMIT").ok());
  CHECK(count(*r) == 2);
  // A second writer waits for the first instead of failing with "database is locked".
  auto w2 = Database::Open(path, Database::Mode::kReadWriteCreate, "test database");
  REQUIRE(w2.ok());
  REQUIRE(w->Exec("BEGIN IMMEDIATE; INSERT INTO t VALUES(3)").ok());
  Status committed;  // checked after the join: Catch2's assertions are not thread-safe
  std::thread commit([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    committed = w->Exec("COMMIT");
  });
  CHECK(w2->Exec("INSERT INTO t VALUES(4)").ok());
  commit.join();
  CHECK(committed.ok());
  CHECK(count(*w2) == 4);
  // A transaction whose body fails leaves nothing behind and returns the body's error.
  CHECK(w2->Transaction([&] {
            CHECK(w2->Exec("INSERT INTO t VALUES(5)").ok());
            return Status::InvalidArgument("bad row");
          }).message() == "bad row");
  CHECK(count(*w2) == 4);
  CHECK(w2->Transaction([&] { return w2->Exec("INSERT INTO t VALUES(5)"); }).ok());
  CHECK(count(*w2) == 5);
  // Not a database, or no such file: errors naming the path.
  REQUIRE(WriteFileAtomic(path + ".txt", std::string(4096, 'x')).ok());
  CHECK(Database::Open(path + ".txt", Database::Mode::kReadOnly, "test database")
            .status()
            .message()
            .rfind(path + ".txt: not a test database", 0) == 0);
  CHECK(Database::Open(path + ".none", Database::Mode::kReadOnly, "test database")
            .status()
            .message() == path + ".none: no such test database");
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  std::filesystem::remove(path + ".txt");
}

TEST_CASE("FromSeconds: rounds to whole nanoseconds", "[base]") {
  CHECK(FromSeconds(1.5).count() == 1'500'000'000);
  CHECK(FromSeconds(1e-9 * 0.6).count() == 1);
  CHECK(ToSeconds(SimTime(2'000'000'000)) == 2.0);
}

TEST_CASE("Percentile: takes element floor(p * n) of the sorted values, as LoadGen does",
          "[base]") {
  std::vector<int> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  CHECK(Percentile(v, 0.99) == 100);  // floor(0.99 * 100) = 99 -> 100th smallest
  CHECK(Percentile(v, 0.50) == 51);
  std::vector<int> one{7};
  CHECK(Percentile(one, 0.99) == 7);
}

TEST_CASE("Median: the middle value, or the mean of the middle two", "[base]") {
  CHECK(Median({3, 1, 2}) == 2);
  CHECK(Median({4, 1, 3, 2}) == 2.5);
  CHECK(Median({}) == 0);
}

}  // namespace fathom
