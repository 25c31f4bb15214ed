#include "coordinator/state/state_store.h"

#include <sqlite3.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "coordinator/state/auth.h"
#include "coordinator/state/state_dir.h"
#include "coordinator/state/state_schema.h"
#include "shard/common/logging.h"
#include "shard/spec/step_metric_fields.h"

namespace shardd {
namespace {

// A prepared statement bound positionally; finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& Bind(const std::string& v) {
    if (ok()) rc_ = sqlite3_bind_blob(s_, ++i_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int64_t v) {
    if (ok()) rc_ = sqlite3_bind_int64(s_, ++i_, v);
    return *this;
  }
  Stmt& Bind(int v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& Bind(double v) {
    if (ok()) rc_ = sqlite3_bind_double(s_, ++i_, v);
    return *this;
  }
  // Runs to completion (writes).
  Status Run() {
    if (!ok()) return Error();
    rc_ = sqlite3_step(s_);
    return rc_ == SQLITE_DONE ? shard::OkStatus() : Error();
  }
  // Steps once (reads): true while a row is available.
  StatusOr<bool> Next() {
    if (!ok()) return Error();
    rc_ = sqlite3_step(s_);
    if (rc_ == SQLITE_ROW) return true;
    if (rc_ == SQLITE_DONE) return false;
    return Error();
  }
  std::string Text(int col) const {
    const void* p = sqlite3_column_blob(s_, col);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(s_, col)) : std::string();
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Real(int col) const { return sqlite3_column_double(s_, col); }
  // SQLite stores a bound NaN as NULL: read it back as NaN.
  double RealOrNaN(int col) const {
    return sqlite3_column_type(s_, col) == SQLITE_NULL ? std::numeric_limits<double>::quiet_NaN() : Real(col);
  }

 private:
  bool ok() const { return rc_ == SQLITE_OK || rc_ == SQLITE_ROW || rc_ == SQLITE_DONE; }
  Status Error() const { return shard::Internal(std::string("state store: ") + sqlite3_errmsg(db_)); }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_OK;
  int i_ = 0;
};

int64_t JobNumber(const std::string& id) {
  auto dash = id.rfind('-');
  if (dash == std::string::npos) return 0;
  try {
    return std::stoll(id.substr(dash + 1));
  } catch (...) {
    return 0;
  }
}

Status PutJobLocked(sqlite3* db, const JobRecord& j) {
  return Stmt(db,
              "INSERT OR REPLACE INTO jobs(id,name,state,attempt,restarts,reason,spec,progress,worker_token,"
              "created_ms,updated_ms,seq,number,join_token,stall,memory_dir,memory_tier_removed) "
              "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
      .Bind(j.id).Bind(j.name).Bind(j.state).Bind(j.attempt).Bind(j.restarts).Bind(j.reason).Bind(j.spec)
      .Bind(j.progress).Bind(j.worker_token).Bind(j.created_ms).Bind(j.updated_ms).Bind(j.seq)
      .Bind(JobNumber(j.id)).Bind(j.join_token).Bind(j.stall).Bind(j.memory_dir)
      .Bind(static_cast<int64_t>(j.memory_tier_removed ? 1 : 0))
      .Run();
}

// The first problem PRAGMA quick_check reports; "" when the file is sound.
// SQLite reports some damage (a garbled header) as an error of the pragma
// itself rather than as rows: that is a problem too.
std::string QuickCheckProblem(sqlite3* db) {
  Stmt s(db, "PRAGMA quick_check");
  std::string first;
  while (true) {
    StatusOr<bool> row = s.Next();
    if (!row.ok()) return row.status().message();
    if (!*row) break;
    if (first.empty()) first = s.Text(0);
  }
  return first == "ok" ? "" : (first.empty() ? "no answer" : first);
}

Status CorruptStore(const std::string& path, const std::string& problem) {
  const std::string bak = path + ".bak";
  std::error_code ec;
  const std::string way_out =
      std::filesystem::exists(bak, ec)
          ? "restore the copy kept at the last good start: mv " + path + " " + path + ".corrupt && rm -f " + path +
                "-wal " + path + "-shm && cp " + bak + " " + path
          : "no backup " + bak + " exists; move " + path + " away to start with an empty state";
  std::string first_line = problem.substr(0, problem.find('\n'));
  return shard::FailedPrecondition("state database " + path + " is corrupt (" + first_line +
                                   "); shardd will not serve it: " + way_out);
}

Status ExecSql(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return shard::Internal("state store: " + msg);
  }
  return shard::OkStatus();
}

// Databases written before worker tokens were hashed hold them in plain text:
// hash them in place. secure_delete overwrites the old values' bytes, and the
// WAL (which held copies of the old pages) is checkpointed and truncated.
Status HashPlaintextTokens(sqlite3* db) {
  std::vector<std::pair<std::string, std::string>> plain;  // id, token
  {
    Stmt s(db, "SELECT id, worker_token FROM jobs WHERE worker_token != ''");
    while (true) {
      ASSIGN_OR_RETURN(bool row, s.Next());
      if (!row) break;
      if (!IsTokenHash(s.Text(1))) plain.emplace_back(s.Text(0), s.Text(1));
    }
  }
  if (plain.empty()) return shard::OkStatus();
  RETURN_IF_ERROR(ExecSql(db, "PRAGMA secure_delete=ON; BEGIN IMMEDIATE;"));
  for (const auto& [id, token] : plain) {
    Status st = Stmt(db, "UPDATE jobs SET worker_token=? WHERE id=?").Bind(HashToken(token)).Bind(id).Run();
    if (!st.ok()) {
      (void)ExecSql(db, "ROLLBACK;");
      return st;
    }
  }
  RETURN_IF_ERROR(ExecSql(db, "COMMIT; PRAGMA wal_checkpoint(TRUNCATE);"));
  LOG_WARN("state database: hashed the plain-text worker tokens of {} job(s) (older shardd)", plain.size());
  return shard::OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& state_dir) {
  RETURN_IF_ERROR(SecureStateDir(state_dir));
  const std::string path = (std::filesystem::path(state_dir) / "shardd.db").string();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (*suffix && !std::filesystem::exists(path + suffix)) continue;
    RETURN_IF_ERROR(SecurePrivateFile(path + suffix));
  }
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return shard::Internal("cannot open state database " + path + ": " + msg);
  }
  std::unique_ptr<StateStore> store(new StateStore(db));
  sqlite3_busy_timeout(db, 5000);
  // Before anything writes to it: a damaged file would otherwise open, read
  // as empty tables and be written over (issue 18 item 10).
  const std::string problem = QuickCheckProblem(db);
  if (!problem.empty()) return CorruptStore(path, problem);
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
                      .WithContext("state database " + path));
  // Created, migrated or refused against the one declaration (state_schema.h):
  // a database that is not this shardd's schema is never written to.
  RETURN_IF_ERROR(state_schema::Apply(db, path));
  RETURN_IF_ERROR(HashPlaintextTokens(db).WithContext("state database " + path + ": hashing worker tokens"));
  RETURN_IF_ERROR(store->Backup(path + ".bak"));
  return store;
}

Status StateStore::Backup(const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  // A consistent copy through SQLite's online backup (WAL content included),
  // written beside the target and renamed over it, so a crash mid-copy never
  // leaves a half-written backup under the name the corrupt-store message names.
  const std::string tmp = to + ".tmp";
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  sqlite3* out = nullptr;
  if (sqlite3_open(tmp.c_str(), &out) != SQLITE_OK) {
    std::string msg = out ? sqlite3_errmsg(out) : "out of memory";
    sqlite3_close(out);
    return shard::Internal("cannot create the state backup " + tmp + ": " + msg);
  }
  sqlite3_backup* b = sqlite3_backup_init(out, "main", db_, "main");
  int rc = b ? sqlite3_backup_step(b, -1) : sqlite3_errcode(out);
  if (b) sqlite3_backup_finish(b);
  std::string msg = sqlite3_errmsg(out);
  sqlite3_close(out);
  if (rc != SQLITE_DONE) {
    std::filesystem::remove(tmp, ec);
    return shard::Internal("cannot back up the state database to " + to + ": " + msg);
  }
  // Like shardd.db itself: only the owner reads it (it holds token hashes and
  // every job's spec).
  std::filesystem::permissions(tmp, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace, ec);
  if (ec) return shard::Internal("cannot restrict the state backup " + tmp + " to mode 0600: " + ec.message());
  std::filesystem::rename(tmp, to, ec);
  if (ec) return shard::Internal("cannot rename the state backup " + tmp + " to " + to + ": " + ec.message());
  return shard::OkStatus();
}

StateStore::~StateStore() { sqlite3_close(db_); }

Status StateStore::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return shard::Internal("state store: " + msg);
  }
  return shard::OkStatus();
}

Status StateStore::PutJob(const JobRecord& j) {
  std::lock_guard<std::mutex> lock(mu_);
  return PutJobLocked(db_, j);
}

StatusOr<std::vector<JobRecord>> StateStore::LoadJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "SELECT id,name,state,attempt,restarts,reason,spec,progress,worker_token,created_ms,updated_ms,seq,"
         "join_token,stall,memory_dir,memory_tier_removed FROM jobs ORDER BY number");
  std::vector<JobRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Next());
    if (!row) break;
    JobRecord j;
    j.id = s.Text(0);
    j.name = s.Text(1);
    j.state = static_cast<int>(s.Int(2));
    j.attempt = static_cast<int>(s.Int(3));
    j.restarts = static_cast<int>(s.Int(4));
    j.reason = s.Text(5);
    j.spec = s.Text(6);
    j.progress = s.Text(7);
    j.worker_token = s.Text(8);
    j.created_ms = s.Int(9);
    j.updated_ms = s.Int(10);
    j.seq = s.Int(11);
    j.join_token = s.Text(12);
    j.stall = s.Text(13);
    j.memory_dir = s.Text(14);
    j.memory_tier_removed = s.Int(15) != 0;
    out.push_back(std::move(j));
  }
  return out;
}

StatusOr<int64_t> StateStore::MaxJobNumber() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT COALESCE(MAX(number), 0) FROM jobs");
  ASSIGN_OR_RETURN(bool row, s.Next());
  return row ? s.Int(0) : 0;
}

Status StateStore::PutWorker(const WorkerRecord& w) {
  std::lock_guard<std::mutex> lock(mu_);
  return Stmt(db_, "INSERT OR REPLACE INTO workers(job_id,attempt,rank,pid,hostname,state) VALUES(?,?,?,?,?,?)")
      .Bind(w.job_id).Bind(w.attempt).Bind(w.rank).Bind(w.pid).Bind(w.hostname).Bind(w.state)
      .Run();
}

Status StateStore::PutResources(const ResourceRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  return Stmt(db_, "INSERT OR REPLACE INTO job_resources(job_id,demand,placement) VALUES(?,?,?)")
      .Bind(r.job_id).Bind(r.demand).Bind(r.placement)
      .Run();
}

StatusOr<std::vector<ResourceRecord>> StateStore::LoadResources() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT job_id,demand,placement FROM job_resources ORDER BY job_id");
  std::vector<ResourceRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Next());
    if (!row) break;
    out.push_back({s.Text(0), s.Text(1), s.Text(2)});
  }
  return out;
}

StatusOr<std::vector<WorkerRecord>> StateStore::LoadWorkers(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT rank,pid,hostname,state FROM workers WHERE job_id=? AND attempt=? ORDER BY rank");
  s.Bind(job_id).Bind(attempt);
  std::vector<WorkerRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Next());
    if (!row) break;
    out.push_back({job_id, attempt, static_cast<int>(s.Int(0)), static_cast<int>(s.Int(1)), s.Text(2), s.Text(3)});
  }
  return out;
}

Status StateStore::AppendEvent(const EventRecord& e, const JobRecord& job) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Exec("BEGIN"));
  Status st = Stmt(db_, "INSERT INTO events(job_id,seq,unix_ms,attempt,kind,message,state) VALUES(?,?,?,?,?,?,?)")
                  .Bind(e.job_id).Bind(e.seq).Bind(e.unix_ms).Bind(e.attempt).Bind(e.kind).Bind(e.message)
                  .Bind(e.state)
                  .Run();
  if (st.ok()) st = PutJobLocked(db_, job);
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    return st;
  }
  return Exec("COMMIT");
}

StatusOr<std::vector<EventRecord>> StateStore::LoadEvents(const std::string& job_id, int64_t after_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT seq,unix_ms,attempt,kind,message,state FROM events WHERE job_id=? AND seq>? ORDER BY seq");
  s.Bind(job_id).Bind(after_seq);
  std::vector<EventRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Next());
    if (!row) break;
    out.push_back({job_id, s.Int(0), s.Int(1), static_cast<int>(s.Int(2)), s.Text(3), s.Text(4),
                   static_cast<int>(s.Int(5))});
  }
  return out;
}

Status StateStore::PutCheckpoint(const CheckpointRecord& c) {
  std::lock_guard<std::mutex> lock(mu_);
  return Stmt(db_,
              "INSERT OR REPLACE INTO checkpoints(job_id,step,world,files,bytes,path,committed_ms,tier) "
              "VALUES(?,?,?,?,?,?,?,?)")
      .Bind(c.job_id).Bind(c.step).Bind(c.world).Bind(c.files).Bind(c.bytes).Bind(c.path).Bind(c.committed_ms)
      .Bind(c.tier.empty() ? std::string("disk") : c.tier)
      .Run();
}

StatusOr<std::vector<CheckpointRecord>> StateStore::LoadCheckpoints(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT step,world,files,bytes,path,committed_ms,tier FROM checkpoints WHERE job_id=? ORDER BY step");
  s.Bind(job_id);
  std::vector<CheckpointRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Next());
    if (!row) break;
    out.push_back({job_id, s.Int(0), static_cast<int>(s.Int(1)), static_cast<int>(s.Int(2)), s.Int(3), s.Text(4),
                   s.Int(5), s.Text(6)});
  }
  return out;
}

Status StateStore::DeleteCheckpoint(const std::string& job_id, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  return Stmt(db_, "DELETE FROM checkpoints WHERE job_id=? AND step=?").Bind(job_id).Bind(step).Run();
}

namespace {

// The metrics columns every row has, then one per optional figure of
// shard/spec/step_metric_fields.h (named as the figure), read and written by
// name: a figure added to the table needs nothing here.
constexpr const char* kMetricColumns =
    "step,attempt,loss,lr,grad_norm,tokens,seconds,skipped,loss_scale,eval_samples,eval_loss,eval_exact_match,pairs,"
    "eval_pairs,moe_experts,expert_load";
constexpr int kMetricColumnCount = 16;

std::string FigureColumns() {
  std::string out;
  for (const shard::StepMetricField& f : shard::StepMetricFields()) out.append(",").append(f.name);
  return out;
}

// expert_load as a BLOB of the doubles' bytes ('' = none).
std::string LoadBytes(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}
std::vector<double> LoadFromBytes(const std::string& b) {
  std::vector<double> v(b.size() / sizeof(double));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(double));
  return v;
}

shard::StepMetrics ReadMetricRow(const Stmt& s) {
  shard::StepMetrics m;
  m.step = s.Int(0);
  m.attempt = static_cast<int>(s.Int(1));
  m.loss = s.RealOrNaN(2);
  m.lr = s.Real(3);
  m.grad_norm = s.RealOrNaN(4);
  m.tokens = s.Int(5);
  m.seconds = s.Real(6);
  m.skipped = s.Int(7) != 0;
  m.loss_scale = s.Real(8);
  m.eval_samples = s.Int(9);
  m.eval_loss = m.eval_samples > 0 ? s.RealOrNaN(10) : 0;
  m.eval_exact_match = s.Real(11);
  m.pairs = s.Int(12);       // 0 in a row from before these columns, or of an SFT step
  m.eval_pairs = s.Int(13);  // 0 in a row from before these columns, or with no eval on pairs
  m.moe_experts = static_cast<int>(s.Int(14));
  m.expert_load = LoadFromBytes(s.Text(15));
  m.moe_layers = m.moe_experts > 0 ? static_cast<int64_t>(m.expert_load.size()) / m.moe_experts : 0;
  int col = kMetricColumnCount;
  for (const shard::StepMetricField& f : shard::StepMetricFields()) {
    // NULL (a NaN on a skipped step) reads back as NaN; a figure without its count stays 0.
    if (m.*f.present_if > 0) m.*f.value = s.RealOrNaN(col);
    ++col;
  }
  return m;
}

}  // namespace

Status StateStore::PutMetrics(const std::string& job_id, const std::vector<shard::StepMetrics>& rows) {
  if (rows.empty()) return shard::OkStatus();
  static const std::string sql = [] {
    std::string q = std::string("INSERT OR REPLACE INTO metrics(job_id,") + kMetricColumns + FigureColumns() + ") VALUES(?";
    for (size_t i = 0; i < kMetricColumnCount + shard::StepMetricFields().size(); ++i) q += ",?";
    return q + ")";
  }();
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Exec("BEGIN"));
  for (const shard::StepMetrics& m : rows) {
    Stmt s(db_, sql.c_str());
    s.Bind(job_id).Bind(m.step).Bind(m.attempt).Bind(m.loss).Bind(m.lr).Bind(m.grad_norm).Bind(m.tokens)
        .Bind(m.seconds).Bind(m.skipped ? 1 : 0).Bind(m.loss_scale).Bind(m.eval_samples).Bind(m.eval_loss)
        .Bind(m.eval_exact_match).Bind(m.pairs).Bind(m.eval_pairs).Bind(m.moe_experts).Bind(LoadBytes(m.expert_load));
    for (const shard::StepMetricField& f : shard::StepMetricFields()) s.Bind(m.*f.value);
    Status st = s.Run();
    if (!st.ok()) {
      (void)Exec("ROLLBACK");
      return st;
    }
  }
  return Exec("COMMIT");
}

StatusOr<std::vector<shard::StepMetrics>> StateStore::LoadMetrics(const std::string& job_id, const MetricsQuery& q) {
  std::lock_guard<std::mutex> lock(mu_);
  // LIMIT -1 is no limit. "The last N" reads the newest N backwards and puts
  // them back in order; both forms walk the (job_id, step) key.
  const int64_t max_rows = q.max_rows > 0 ? q.max_rows : -1;
  const std::string columns = std::string("SELECT ") + kMetricColumns + FigureColumns() + " ";
  const std::string sql = columns + (q.last > 0 ? "FROM (SELECT * FROM metrics WHERE job_id=? AND step>? ORDER BY step "
                                                  "DESC LIMIT ?) ORDER BY step LIMIT ?"
                                                : "FROM metrics WHERE job_id=? AND step>? ORDER BY step LIMIT ?");
  Stmt s(db_, sql.c_str());
  s.Bind(job_id).Bind(q.after_step);
  if (q.last > 0) s.Bind(q.last);
  s.Bind(max_rows);
  std::vector<shard::StepMetrics> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Next());
    if (!row) break;
    out.push_back(ReadMetricRow(s));
  }
  return out;
}

}  // namespace shardd
