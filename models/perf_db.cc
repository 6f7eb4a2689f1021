#include "models/perf_db.h"

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

}  // namespace

Result<PerfDb> PerfDb::Open(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Database db,
                          sqlite::Database::Open(path, sqlite::Database::Mode::kReadWriteCreate,
                                                 "performance database"));
  FATHOM_RETURN_IF_ERROR(db.Exec(kSchema));
  // Databases written before the dims column get it, empty for their rows.
  if (!db.Prepare("SELECT dims FROM op_latency LIMIT 0").ok()) {
    FATHOM_RETURN_IF_ERROR(
        db.Exec("ALTER TABLE op_latency ADD COLUMN dims TEXT NOT NULL DEFAULT ''"));
  }
  return PerfDb(std::move(db));
}

Status PerfDb::Insert(const OpMeasurement& m) { return Insert(std::vector<OpMeasurement>{m}); }

Status PerfDb::Insert(const std::vector<OpMeasurement>& rows) {
  return db_.Transaction([&]() -> Status {
    for (const OpMeasurement& m : rows) FATHOM_RETURN_IF_ERROR(InsertOne(m));
    return Status::Ok();
  });
}

Status PerfDb::InsertOne(const OpMeasurement& m) {
  if (!(m.median_us > 0)) {
    return Status::InvalidArgument(db_.path() + ": " + m.op +
                                   " median_us = " + std::to_string(m.median_us) + ": must be > 0");
  }
  if (m.source != "measured" && m.source != "imported" && m.source != "published") {
    return Status::InvalidArgument(db_.path() + ": source = \"" + m.source +
                                   "\": must be measured, imported or published");
  }
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare("INSERT INTO op_latency(hardware, stack, op, dtype, m, n, k, extra, median_us, "
                  "p10_us, p90_us, count, "
                  "source, date, device_info, dims) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  int i = 0;
  for (const std::string* text : {&m.hardware, &m.stack, &m.op, &m.dtype})
    FATHOM_RETURN_IF_ERROR(st.Bind(++i, *text));
  for (int64_t v : {m.m, m.n, m.k, m.extra}) FATHOM_RETURN_IF_ERROR(st.Bind(++i, v));
  for (double v : {m.median_us, m.p10_us, m.p90_us}) FATHOM_RETURN_IF_ERROR(st.Bind(++i, v));
  FATHOM_RETURN_IF_ERROR(st.Bind(++i, m.count));
  for (const std::string* text : {&m.source, &m.date, &m.device_info, &m.dims})
    FATHOM_RETURN_IF_ERROR(st.Bind(++i, *text));
  return st.Step().status();
}

Status PerfDb::InsertKernels(const std::vector<KernelRecord>& kernels) {
  FATHOM_ASSIGN_OR_RETURN(sqlite::Statement st,
                          db_.Prepare("INSERT INTO kernel_activity(name, kind, start_ns, end_ns, "
                                      "device, stream, correlation, grid_x, grid_y, "
                                      "grid_z, block_x, block_y, block_z, nvtx_range, source) "
                                      "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  auto insert = [&](const KernelRecord& k) -> Status {
    FATHOM_RETURN_IF_ERROR(st.Reset());
    int i = 0;
    FATHOM_RETURN_IF_ERROR(st.Bind(++i, k.name));
    FATHOM_RETURN_IF_ERROR(st.Bind(++i, k.kind));
    for (int64_t v : {k.start_ns, k.end_ns, int64_t{k.device}, int64_t{k.stream}, k.correlation,
                      int64_t{k.grid[0]}, int64_t{k.grid[1]}, int64_t{k.grid[2]},
                      int64_t{k.block[0]}, int64_t{k.block[1]}, int64_t{k.block[2]}}) {
      FATHOM_RETURN_IF_ERROR(st.Bind(++i, v));
    }
    FATHOM_RETURN_IF_ERROR(st.Bind(++i, k.nvtx_range));
    FATHOM_RETURN_IF_ERROR(st.Bind(++i, k.source));
    return st.Step().status();
  };
  return db_.Transaction([&]() -> Status {
    for (const KernelRecord& k : kernels) FATHOM_RETURN_IF_ERROR(insert(k));
    return Status::Ok();
  });
}

Result<std::vector<std::string>> PerfDb::HardwareNames() const {
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare("SELECT DISTINCT hardware FROM op_latency ORDER BY hardware"));
  std::vector<std::string> out;
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    out.push_back(st.Text(0));
  }
}

Result<std::vector<OpMeasurement>> PerfDb::Query(const std::string& hardware, const std::string& op,
                                                 const std::string& dtype,
                                                 const std::string& stack) const {
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare("SELECT hardware, stack, op, dtype, m, n, k, extra, median_us, p10_us, p90_us, "
                  "count, source, date, "
                  "device_info, dims FROM op_latency WHERE hardware = ?1 AND (?2 = '' OR op = ?2) "
                  "AND (?3 = '' OR dtype = ?3) "
                  "AND (?4 = '' OR stack = ?4) ORDER BY op, dtype, n, k, extra, m"));
  FATHOM_RETURN_IF_ERROR(st.Bind(1, hardware));
  FATHOM_RETURN_IF_ERROR(st.Bind(2, op));
  FATHOM_RETURN_IF_ERROR(st.Bind(3, dtype));
  FATHOM_RETURN_IF_ERROR(st.Bind(4, stack));
  std::vector<OpMeasurement> out;
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    OpMeasurement m;
    m.hardware = st.Text(0);
    m.stack = st.Text(1);
    m.op = st.Text(2);
    m.dtype = st.Text(3);
    m.m = st.Int(4);
    m.n = st.Int(5);
    m.k = st.Int(6);
    m.extra = st.Int(7);
    m.median_us = st.Double(8);
    m.p10_us = st.Double(9);
    m.p90_us = st.Double(10);
    m.count = st.Int(11);
    m.source = st.Text(12);
    m.date = st.Text(13);
    m.device_info = st.Text(14);
    m.dims = st.Text(15);
    out.push_back(std::move(m));
  }
}

Result<std::vector<KernelRecord>> PerfDb::Kernels() const {
  FATHOM_ASSIGN_OR_RETURN(
      sqlite::Statement st,
      db_.Prepare(
          "SELECT name, kind, start_ns, end_ns, device, stream, correlation, grid_x, grid_y, "
          "grid_z, block_x, "
          "block_y, block_z, nvtx_range, source FROM kernel_activity ORDER BY start_ns, id"));
  std::vector<KernelRecord> out;
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    KernelRecord k;
    k.name = st.Text(0);
    k.kind = st.Text(1);
    k.start_ns = st.Int(2);
    k.end_ns = st.Int(3);
    k.device = static_cast<int32_t>(st.Int(4));
    k.stream = static_cast<int32_t>(st.Int(5));
    k.correlation = st.Int(6);
    for (int i = 0; i < 3; ++i) {
      k.grid[i] = static_cast<int32_t>(st.Int(7 + i));
      k.block[i] = static_cast<int32_t>(st.Int(10 + i));
    }
    k.nvtx_range = st.Text(13);
    k.source = st.Text(14);
    out.push_back(std::move(k));
  }
}

std::optional<std::string_view> DimText(std::string_view dims, std::string_view key) {
  size_t pos = 0;
  while (pos < dims.size()) {
    const size_t end = std::min(dims.find(' ', pos), dims.size());
    const std::string_view token = dims.substr(pos, end - pos);
    pos = end + 1;
    if (token.size() <= key.size() || token.substr(0, key.size()) != key ||
        token[key.size()] != '=')
      continue;
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

std::optional<double> InterpolateLogLog(const std::vector<std::pair<double, double>>& points,
                                        double x) {
  if (points.empty()) return std::nullopt;
  // Below the smallest measured shape a kernel gets no faster (launch and tail floor).
  if (x <= points.front().first) return points.front().second;
  if (points.size() == 1)
    return points[0].second * (x / points[0].first);  // linear above one point
  auto it =
      std::lower_bound(points.begin(), points.end(), x,
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
