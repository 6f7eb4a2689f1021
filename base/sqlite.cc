#include "base/sqlite.h"

#include <filesystem>
#include <memory>

namespace fathom::sqlite {

Statement::Statement(Statement&& other) noexcept : stmt_(other.stmt_), path_(other.path_) {
  other.stmt_ = nullptr;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Status Statement::Check(int code, const char* what) const {
  if (code == SQLITE_OK) return Status::Ok();
  return Status::IoError(*path_ + ": " + what + ": " + sqlite3_errstr(code) + " (" +
                         sqlite3_errmsg(sqlite3_db_handle(stmt_)) + ")");
}

Status Statement::Bind(int i, const std::string& text) {
  return Check(
      sqlite3_bind_text(stmt_, i, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT),
      "bind");
}
Status Statement::Bind(int i, double value) {
  return Check(sqlite3_bind_double(stmt_, i, value), "bind");
}
Status Statement::Bind(int i, int64_t value) {
  return Check(sqlite3_bind_int64(stmt_, i, value), "bind");
}
Status Statement::Bind(int i, const std::optional<double>& value) {
  return value ? Bind(i, *value) : Check(sqlite3_bind_null(stmt_, i), "bind");
}

Status Statement::Bind(int i, const std::optional<int64_t>& value) {
  return value ? Bind(i, *value) : Check(sqlite3_bind_null(stmt_, i), "bind");
}

Status Statement::Bind(int i, const std::optional<std::string>& value) {
  return value ? Bind(i, *value) : Check(sqlite3_bind_null(stmt_, i), "bind");
}

Status Statement::Reset() {
  sqlite3_reset(stmt_);  // returns the last step's error, already reported
  return Check(sqlite3_clear_bindings(stmt_), "reset");
}

Result<bool> Statement::Step() {
  const int code = sqlite3_step(stmt_);
  if (code == SQLITE_ROW) return true;
  if (code == SQLITE_DONE) return false;
  FATHOM_RETURN_IF_ERROR(Check(code, "step"));
  return false;
}

std::string Statement::Text(int column) const {
  const unsigned char* t = sqlite3_column_text(stmt_, column);
  return t ? reinterpret_cast<const char*>(t) : "";
}
double Statement::Double(int column) const { return sqlite3_column_double(stmt_, column); }
int64_t Statement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }
bool Statement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

Database::Database(sqlite3* db, std::string path)
    : db_(db), path_(std::make_unique<std::string>(std::move(path))) {}

Database::Database(Database&& other) noexcept : db_(other.db_), path_(std::move(other.path_)) {
  other.db_ = nullptr;
}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    sqlite3_close(db_);
    db_ = other.db_;
    path_ = std::move(other.path_);
    other.db_ = nullptr;
  }
  return *this;
}

Database::~Database() { sqlite3_close(db_); }

Result<Database> Database::Open(const std::string& path, Mode mode, const std::string& what) {
  if (mode == Mode::kReadOnly && !std::filesystem::is_regular_file(path)) {
    return Status::NotFound(path + ": no such " + what);
  }
  sqlite3* raw = nullptr;
  const int flags =
      mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int code = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Database db(raw, path);
  if (code != SQLITE_OK) {
    return Status::IoError(path + ": cannot open " + what + ": " +
                           (raw ? sqlite3_errmsg(raw) : sqlite3_errstr(code)));
  }
  sqlite3_busy_timeout(raw, 30000);  // wait up to 30 s for another writer instead of failing
  // A file that is not a database fails here, not at the first query.
  {
    auto probe = db.Prepare("SELECT count(*) FROM sqlite_master");
    const Status readable = probe.ok() ? probe->Step().status() : probe.status();
    if (!readable.ok())
      return Status::InvalidArgument(path + ": not a " + what + " (" + sqlite3_errmsg(raw) + ")");
  }
  if (mode == Mode::kReadWriteCreate) {
    // Write-ahead logging: readers see the last commit while a writer goes on. With WAL, NORMAL
    // syncs at checkpoints, not at every commit: a killed process loses nothing committed (a
    // power cut may lose the last commits, never consistency), and a sweep's coordinator, which
    // commits each result as it arrives, is not held to one disk flush per result.
    FATHOM_RETURN_IF_ERROR(db.Exec("PRAGMA journal_mode=WAL"));
    FATHOM_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous=NORMAL"));
  }
  return db;
}

Status Database::Exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Status::IoError(*path_ + ": " + msg);
  }
  return Status::Ok();
}

Status Database::Transaction(const std::function<Status()>& body) const {
  FATHOM_RETURN_IF_ERROR(Exec("BEGIN"));
  const Status status = body();
  if (status.ok()) return Exec("COMMIT");
  if (Status rolled_back = Exec("ROLLBACK"); !rolled_back.ok()) {
    return Status::IoError(status.message() +
                           "; rolling back failed too: " + rolled_back.message());
  }
  return status;
}

Result<Statement> Database::Prepare(const std::string& sql) const {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Status::IoError(*path_ + ": " + sqlite3_errmsg(db_));
  }
  return Statement(stmt, path_.get());
}

bool Database::HasTable(const std::string& name) const {
  auto st = Prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  if (!st.ok() || !st->Bind(1, name).ok()) return false;
  auto row = st->Step();
  return row.ok() && *row;
}

}  // namespace fathom::sqlite
