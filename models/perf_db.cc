#include "models/perf_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace fathom::models {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS op_latency(
  id INTEGER PRIMARY KEY,
  hardware TEXT NOT NULL, stack TEXT NOT NULL, op TEXT NOT NULL, dtype TEXT NOT NULL,
  m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, extra INTEGER NOT NULL,
  median_us REAL NOT NULL CHECK(median_us > 0), p10_us REAL, p90_us REAL, count INTEGER,
  source TEXT NOT NULL CHECK(source IN ('measured', 'imported', 'published')),
  date TEXT, device_info TEXT, dims TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS op_latency_lookup ON op_latency(hardware, op, dtype, n, k);
CREATE TABLE IF NOT EXISTS kernel_activity(
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, device INTEGER, stream INTEGER,
  correlation INTEGER, grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
  block_x INTEGER, block_y INTEGER, block_z INTEGER, nvtx_range TEXT, source TEXT);
)sql";

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt* get() const { return stmt_; }
  void Text(int i, const std::string& s) { sqlite3_bind_text(stmt_, i, s.c_str(), -1, SQLITE_TRANSIENT); }
  void Int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Real(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  std::string ColText(int i) const {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace

Result<PerfDb> PerfDb::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    const std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::IoError(path + ": cannot open performance database: " + msg);
  }
  PerfDb out(db);
  out.path_ = path;
  FATHOM_RETURN_IF_ERROR(out.Exec(kSchema));
  // Databases written before the dims column get it, empty for their rows.
  if (Statement probe(db, "SELECT dims FROM op_latency LIMIT 0"); probe.get() == nullptr) {
    FATHOM_RETURN_IF_ERROR(out.Exec("ALTER TABLE op_latency ADD COLUMN dims TEXT NOT NULL DEFAULT ''"));
  }
  return out;
}

PerfDb::PerfDb(PerfDb&& other) noexcept : db_(other.db_), path_(std::move(other.path_)) { other.db_ = nullptr; }

PerfDb& PerfDb::operator=(PerfDb&& other) noexcept {
  if (this != &other) {
    sqlite3_close(db_);
    db_ = other.db_;
    path_ = std::move(other.path_);
    other.db_ = nullptr;
  }
  return *this;
}

PerfDb::~PerfDb() { sqlite3_close(db_); }

Status PerfDb::Exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Status::IoError(path_ + ": " + msg);
  }
  return Status::Ok();
}

Status PerfDb::Insert(const OpMeasurement& m) { return Insert(std::vector<OpMeasurement>{m}); }

Status PerfDb::Insert(const std::vector<OpMeasurement>& rows) {
  FATHOM_RETURN_IF_ERROR(Exec("BEGIN"));
  for (const OpMeasurement& m : rows) {
    if (Status s = InsertOne(m); !s.ok()) {
      (void)Exec("ROLLBACK");
      return s;
    }
  }
  return Exec("COMMIT");
}

Status PerfDb::InsertOne(const OpMeasurement& m) {
  if (!(m.median_us > 0)) {
    return Status::InvalidArgument(path_ + ": " + m.op + " median_us = " + std::to_string(m.median_us) + ": must be > 0");
  }
  if (m.source != "measured" && m.source != "imported" && m.source != "published") {
    return Status::InvalidArgument(path_ + ": source = \"" + m.source + "\": must be measured, imported or published");
  }
  Statement st(db_,
               "INSERT INTO op_latency(hardware, stack, op, dtype, m, n, k, extra, median_us, p10_us, p90_us, count, "
               "source, date, device_info, dims) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  st.Text(1, m.hardware);
  st.Text(2, m.stack);
  st.Text(3, m.op);
  st.Text(4, m.dtype);
  st.Int(5, m.m);
  st.Int(6, m.n);
  st.Int(7, m.k);
  st.Int(8, m.extra);
  st.Real(9, m.median_us);
  st.Real(10, m.p10_us);
  st.Real(11, m.p90_us);
  st.Int(12, m.count);
  st.Text(13, m.source);
  st.Text(14, m.date);
  st.Text(15, m.device_info);
  st.Text(16, m.dims);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Status::IoError(path_ + ": insert failed: " + sqlite3_errmsg(db_));
  return Status::Ok();
}

Status PerfDb::InsertKernels(const std::vector<KernelRecord>& kernels) {
  FATHOM_RETURN_IF_ERROR(Exec("BEGIN"));
  Statement st(db_,
               "INSERT INTO kernel_activity(name, kind, start_ns, end_ns, device, stream, correlation, grid_x, grid_y, "
               "grid_z, block_x, block_y, block_z, nvtx_range, source) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  for (const KernelRecord& k : kernels) {
    sqlite3_reset(st.get());
    st.Text(1, k.name);
    st.Text(2, k.kind);
    st.Int(3, k.start_ns);
    st.Int(4, k.end_ns);
    st.Int(5, k.device);
    st.Int(6, k.stream);
    st.Int(7, k.correlation);
    for (int i = 0; i < 3; ++i) {
      st.Int(8 + i, k.grid[i]);
      st.Int(11 + i, k.block[i]);
    }
    st.Text(14, k.nvtx_range);
    st.Text(15, k.source);
    if (sqlite3_step(st.get()) != SQLITE_DONE) {
      (void)Exec("ROLLBACK");
      return Status::IoError(path_ + ": insert failed: " + sqlite3_errmsg(db_));
    }
  }
  return Exec("COMMIT");
}

Result<std::vector<std::string>> PerfDb::HardwareNames() const {
  Statement st(db_, "SELECT DISTINCT hardware FROM op_latency ORDER BY hardware");
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(st.ColText(0));
  if (rc != SQLITE_DONE) return Status::IoError(path_ + ": query failed: " + sqlite3_errmsg(db_));
  return out;
}

Result<std::vector<OpMeasurement>> PerfDb::Query(const std::string& hardware, const std::string& op,
                                                 const std::string& dtype, const std::string& stack) const {
  Statement st(db_,
               "SELECT hardware, stack, op, dtype, m, n, k, extra, median_us, p10_us, p90_us, count, source, date, "
               "device_info, dims FROM op_latency WHERE hardware = ?1 AND (?2 = '' OR op = ?2) AND (?3 = '' OR dtype = ?3) "
               "AND (?4 = '' OR stack = ?4) ORDER BY op, dtype, n, k, extra, m");
  st.Text(1, hardware);
  st.Text(2, op);
  st.Text(3, dtype);
  st.Text(4, stack);
  std::vector<OpMeasurement> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    OpMeasurement m;
    m.hardware = st.ColText(0);
    m.stack = st.ColText(1);
    m.op = st.ColText(2);
    m.dtype = st.ColText(3);
    m.m = sqlite3_column_int64(st.get(), 4);
    m.n = sqlite3_column_int64(st.get(), 5);
    m.k = sqlite3_column_int64(st.get(), 6);
    m.extra = sqlite3_column_int64(st.get(), 7);
    m.median_us = sqlite3_column_double(st.get(), 8);
    m.p10_us = sqlite3_column_double(st.get(), 9);
    m.p90_us = sqlite3_column_double(st.get(), 10);
    m.count = sqlite3_column_int64(st.get(), 11);
    m.source = st.ColText(12);
    m.date = st.ColText(13);
    m.device_info = st.ColText(14);
    m.dims = st.ColText(15);
    out.push_back(std::move(m));
  }
  if (rc != SQLITE_DONE) return Status::IoError(path_ + ": query failed: " + sqlite3_errmsg(db_));
  return out;
}

Result<std::vector<KernelRecord>> PerfDb::Kernels() const {
  Statement st(db_,
               "SELECT name, kind, start_ns, end_ns, device, stream, correlation, grid_x, grid_y, grid_z, block_x, "
               "block_y, block_z, nvtx_range, source FROM kernel_activity ORDER BY start_ns, id");
  std::vector<KernelRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    KernelRecord k;
    k.name = st.ColText(0);
    k.kind = st.ColText(1);
    k.start_ns = sqlite3_column_int64(st.get(), 2);
    k.end_ns = sqlite3_column_int64(st.get(), 3);
    k.device = static_cast<int32_t>(sqlite3_column_int64(st.get(), 4));
    k.stream = static_cast<int32_t>(sqlite3_column_int64(st.get(), 5));
    k.correlation = sqlite3_column_int64(st.get(), 6);
    for (int i = 0; i < 3; ++i) {
      k.grid[i] = static_cast<int32_t>(sqlite3_column_int64(st.get(), 7 + i));
      k.block[i] = static_cast<int32_t>(sqlite3_column_int64(st.get(), 10 + i));
    }
    k.nvtx_range = st.ColText(13);
    k.source = st.ColText(14);
    out.push_back(std::move(k));
  }
  if (rc != SQLITE_DONE) return Status::IoError(path_ + ": query failed: " + sqlite3_errmsg(db_));
  return out;
}

std::optional<std::string_view> DimText(std::string_view dims, std::string_view key) {
  size_t pos = 0;
  while (pos < dims.size()) {
    const size_t end = std::min(dims.find(' ', pos), dims.size());
    const std::string_view token = dims.substr(pos, end - pos);
    pos = end + 1;
    if (token.size() <= key.size() || token.substr(0, key.size()) != key || token[key.size()] != '=') continue;
    return token.substr(key.size() + 1);
  }
  return std::nullopt;
}

std::optional<int64_t> DimValue(std::string_view dims, std::string_view key) {
  const std::optional<std::string_view> value = DimText(dims, key);
  if (!value) return std::nullopt;
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(value->data(), value->data() + value->size(), v);
  if (ec != std::errc() || ptr != value->data() + value->size()) return std::nullopt;
  return v;
}

std::optional<double> InterpolateLogLog(const std::vector<std::pair<double, double>>& points, double x) {
  if (points.empty()) return std::nullopt;
  // Below the smallest measured shape a kernel gets no faster (launch and tail floor).
  if (x <= points.front().first) return points.front().second;
  if (points.size() == 1) return points[0].second * (x / points[0].first);  // linear above one point
  auto it = std::lower_bound(points.begin(), points.end(), x,
                             [](const std::pair<double, double>& p, double v) { return p.first < v; });
  if (it != points.end() && it->first == x) return it->second;
  size_t hi = static_cast<size_t>(it - points.begin());
  hi = std::clamp<size_t>(hi, 1, points.size() - 1);
  const auto& a = points[hi - 1];
  const auto& b = points[hi];
  const double t = (std::log(x) - std::log(a.first)) / (std::log(b.first) - std::log(a.first));
  return std::exp(std::log(a.second) + t * (std::log(b.second) - std::log(a.second)));
}

}  // namespace fathom::models
