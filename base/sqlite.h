// SQLite with every return code checked: a database handle and prepared statements that close
// themselves, errors that name the file. Databases are opened in write-ahead-log mode with a busy
// timeout, so a reader (`fathom report` watching a sweep) never stops a writer, and two writers
// (two sweeps into one store) wait for each other instead of failing.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"

namespace fathom::sqlite {

class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  Status Bind(int i, const std::string& text);
  Status Bind(int i, double value);
  Status Bind(int i, int64_t value);
  // NULL when empty.
  Status Bind(int i, const std::optional<double>& value);
  Status Bind(int i, const std::optional<int64_t>& value);
  Status Bind(int i, const std::optional<std::string>& value);
  Status Reset();  // ready to bind and step again
  // True with a row to read, false when done.
  Result<bool> Step();

  std::string Text(int column) const;
  double Double(int column) const;
  int64_t Int(int column) const;
  bool IsNull(int column) const;

 private:
  friend class Database;
  Statement(sqlite3_stmt* stmt, const std::string* path) : stmt_(stmt), path_(path) {}
  Status Check(int code, const char* what) const;

  sqlite3_stmt* stmt_ = nullptr;
  const std::string* path_;  // the database's, for errors
};

class Database {
 public:
  enum class Mode { kReadOnly, kReadWriteCreate };
  // `what` names the kind of database in errors ("results database").
  static Result<Database> Open(const std::string& path, Mode mode, const std::string& what);
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  ~Database();

  Status Exec(const std::string& sql) const;
  // Runs `body` in one transaction: committed when it returns ok, rolled back otherwise (its error
  // is returned, with the rollback's when that failed too).
  Status Transaction(const std::function<Status()>& body) const;
  Result<Statement> Prepare(const std::string& sql) const;
  bool HasTable(const std::string& name) const;
  const std::string& path() const { return *path_; }

 private:
  Database(sqlite3* db, std::string path);
  sqlite3* db_ = nullptr;
  std::unique_ptr<std::string> path_;  // stable for the statements that point at it
};

}  // namespace fathom::sqlite
