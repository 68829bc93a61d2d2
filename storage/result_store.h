// ResultStore: every trial, job and device evotune knows, in SQLite.
//
// The only code that speaks SQL. The database runs in WAL mode with
// synchronous=FULL: a call that returned OK is on disk and survives kill -9
// (and power loss). Thread-safe: writes are serialized on one connection,
// reads run on a pool of reader connections and never block the writer.
// TopK and HasTunedProblem answers, and the tuned problems NearestTunedProblem
// searches, are kept in memory until this object next writes a trial that
// changes them (a trial of a TopK's problem; a device's first OK trial of a
// problem): the hot path of QueryBest then reads no SQL, so the process that
// opens a database must be its only writer of trials while it runs (the
// daemon is).
#ifndef EVOTUNE_STORAGE_RESULT_STORE_H_
#define EVOTUNE_STORAGE_RESULT_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/config.h"
#include "core/problem.h"
#include "core/problem_set.h"
#include "core/trial.h"
#include "storage/generation_cache.h"
#include "storage/schema.h"
#include "storage/sqlite.h"

namespace evotune {

// Values are stored and match evotune.v1.JobState: never renumber them.
enum class JobState {
  kQueued = 1,
  kRunning = 2,
  kSucceeded = 3,
  kFailed = 4,
  kCancelled = 5,
};
bool IsFinal(JobState state);
absl::string_view JobStateName(JobState state);

struct StoredTrial {
  int64_t trial_id = 0;
  Config config;
  TrialResult result;
  int64_t created_unix_s = 0;
};

struct JobRecord {
  std::string job_id;
  std::string template_name;
  std::string template_hash;
  Problem problem;
  int64_t max_trials = 0;
  double max_seconds = 0;
  std::string strategy;
  // Every option of the strategy, NAME=value,... (FormatStrategyOptions);
  // empty for a job stored before options existed (the defaults).
  std::string strategy_options;
  uint64_t seed = 0;
  // Started by the daemon (tune on miss), not by a user: runs only while no
  // user's job is queued or running.
  bool background = false;
  DeviceInfo device;
  JobState state = JobState::kQueued;
  std::string error;
  int64_t trials_done = 0;
  double elapsed_seconds = 0;
  int64_t created_unix_s = 0;
  int64_t finished_unix_s = 0;
};

// One finished trial of a job, numbered 1, 2, ... in the order it finished.
struct JobEvent {
  int64_t sequence = 0;
  StoredTrial trial;
  bool cached = false;  // Answered from the store, not measured for this job.
};

// The identity of the results a lookup reads.
struct TrialScope {
  DeviceInfo device;
  std::string template_name;
  std::string template_hash;
  Problem problem;
};

// A result with the scope it is stored under (RecordTimedInTurns').
struct TimedTrial {
  TrialScope scope;
  Config config;
  TrialResult result;
};

struct RankedTrial {
  std::string template_name;
  std::string template_hash;
  StoredTrial trial;
  // A cost model's prediction for another problem than the trial's; 0 when
  // none was made.
  double predicted_us = 0;
  // A config the template fits to the asked problem, never measured (the
  // trial holds only its config).
  bool fitted = false;
};

// An OK trial with the template and problem it measured.
struct MeasuredTrial {
  std::string template_name;
  std::string template_hash;
  Problem problem;
  Config config;
  double median_us = 0;
};

// A kernel compiled for serving: the cubin for a real architecture and the
// PTX of its virtual one.
struct CompiledKernel {
  std::string cubin;
  std::string ptx;
};

// The statements TopK runs for n templates (parameters: device id, problem
// id, the n template ids), exposed so that tests and tools can EXPLAIN them:
// the problem's trials by median, and per template the slowest of its trials
// timed in turns and the newest trial id when one was.
std::string TopKSql(int n_templates);
std::string ConfirmedSql(int n_templates);

class ResultStore {
 public:
  // Reader connections open at most at once (each holds file descriptors
  // and a mapping of the file); a query beyond waits for one to be free.
  static constexpr int kMaxReaders = 32;

  // Opens or creates the database at path and migrates it to kSchemaVersion.
  // The parent directory must exist. A database of a newer schema is refused
  // (FAILED_PRECONDITION).
  static absl::StatusOr<std::unique_ptr<ResultStore>> Open(
      const std::string& path);

  ResultStore(const ResultStore&) = delete;
  ResultStore& operator=(const ResultStore&) = delete;

  absl::StatusOr<int> SchemaVersion();

  // --- Trials. Unique on (device, template, problem, config).

  // Stores a result unless one is already stored for the same key; returns
  // the stored row either way, so a repeated insert never duplicates.
  absl::StatusOr<StoredTrial> InsertTrial(const TrialScope& scope,
                                          const Config& config,
                                          const TrialResult& result);
  // std::nullopt when nothing is stored for that key.
  absl::StatusOr<std::optional<StoredTrial>> FindTrial(const TrialScope& scope,
                                                       const Config& config);
  // Every trial of the scope, in insertion order.
  absl::StatusOr<std::vector<StoredTrial>> ListTrials(const TrialScope& scope);

  // The k fastest OK trials of the problem on the device, by median latency,
  // over the current version of each template in `templates` (name -> hash).
  // A config timed alone that was stored when its template's fastest were
  // timed in turns (RecordTimedInTurns: passed over for them) ranks after
  // them whatever its own time, taken at another moment; one stored later
  // ranks by its time. Indexed lookups that stop once the k are known; no
  // temporary B-tree.
  absl::StatusOr<std::vector<RankedTrial>> TopK(
      const DeviceInfo& device, const Problem& problem,
      const std::vector<std::pair<std::string, std::string>>& templates, int k);

  // The problem nearest to `problem` (by distance in log of batch, heads,
  // kv_heads, seq_q, seq_k and head_dim, another dtype or causal flag
  // counting 1 each) that has OK trials on the device for one of the
  // templates; with `same_class`, only problems of the same head_dim, dtype
  // and causal flag. std::nullopt when none has.
  absl::StatusOr<std::optional<Problem>> NearestTunedProblem(
      const DeviceInfo& device, const Problem& problem,
      const std::vector<std::pair<std::string, std::string>>& templates,
      bool same_class = true);

  // Reads now the problems NearestTunedProblem searches for the device and
  // templates, so that the first query it answers does not wait for that
  // read (tens of milliseconds on a large store).
  absl::Status LoadTunedProblems(
      const DeviceInfo& device,
      const std::vector<std::pair<std::string, std::string>>& templates);

  // Whether the device has OK trials of any of the templates (name -> hash)
  // on any problem: one indexed lookup.
  absl::StatusOr<bool> HasTunedProblem(
      const DeviceInfo& device,
      const std::vector<std::pair<std::string, std::string>>& templates);

  // The device with this name that most recently got a trial, with the
  // limits last recorded for it (RecordDeviceLimits; unknown, compute
  // capability 0, when none were); NOT_FOUND when the store has no device of
  // that name.
  absl::StatusOr<DeviceInfo> FindDevice(const std::string& name);
  // Records the device's limits (shared memory and threads per block,
  // multiprocessors) on its row, when the store has one (a job or a trial on
  // it): a daemon without that GPU serves it with them.
  absl::Status RecordDeviceLimits(const DeviceInfo& device);

  absl::StatusOr<int64_t> CountTrials();
  // The id of the newest trial (0 for none): grows with every insert.
  absl::StatusOr<int64_t> LastTrialId();

  // The configs of the template (name and hash) rejected for resources on
  // the device (spills, registers, shared memory: fixed by the config, the
  // head_dim and the dtype that are compiled in) on any problem of
  // `problem`'s head_dim and dtype, as config keys: what a search of such a
  // problem need not try again.
  absl::StatusOr<std::set<std::string>> RejectedConfigs(
      const DeviceInfo& device, const std::string& template_name,
      const std::string& template_hash, const Problem& problem);

  // Every OK trial on the device, with its template and problem (what a cost
  // model learns from), oldest first.
  absl::StatusOr<std::vector<MeasuredTrial>> MeasuredTrials(
      const DeviceInfo& device);

  // In one transaction: results of configs of one problem timed together in
  // turns (a search's fastest and the problem's fastest of other templates,
  // confirmed; TrialResult::timed_against), each under its own scope,
  // replace what is stored for those configs: their latencies, or, for a
  // config that failed a gate this time (wrong on new inputs), its status
  // and error. A config the store has no trial of is stored.
  absl::Status RecordTimedInTurns(const std::vector<TimedTrial>& results);

  // --- Jobs.

  // ALREADY_EXISTS when the id is taken.
  absl::Status CreateJob(const JobRecord& job);
  // NOT_FOUND for an unknown id.
  absl::StatusOr<JobRecord> GetJob(const std::string& job_id);
  // Newest first; every state when `state` is empty.
  absl::StatusOr<std::vector<JobRecord>> ListJobs(
      std::optional<JobState> state);
  // Sets state and error; a final state also sets finished_unix_s.
  absl::Status SetJobState(const std::string& job_id, JobState state,
                           const std::string& error);

  // In one transaction: stores the trial (idempotently), appends it to the
  // job's events as the next sequence number, and advances the job's
  // trials_done and elapsed_seconds. Returns the event.
  absl::StatusOr<JobEvent> AppendJobTrial(const JobRecord& job,
                                          const Config& config,
                                          const TrialResult& result,
                                          bool cached, double elapsed_seconds);
  // Events with sequence > after, at most `limit`, in order.
  absl::StatusOr<std::vector<JobEvent>> ListJobEvents(const std::string& job_id,
                                                      int64_t after, int limit);
  // The fastest OK trial among the job's events.
  absl::StatusOr<std::optional<StoredTrial>> JobBest(const std::string& job_id);

  // --- Compiled kernels (GetKernel's cache), by a key the caller makes
  // (one that names template version, config, the problem fields the
  // compiler sees, architecture and compiler version).

  // std::nullopt when nothing is stored under the key.
  absl::StatusOr<std::optional<CompiledKernel>> FindCompiledKernel(
      const std::string& key);
  // Stores the kernel unless the key is taken (compiles are deterministic,
  // so the first stored one stays).
  absl::Status PutCompiledKernel(const std::string& key,
                                 const CompiledKernel& kernel);

  // Loads many trials in one transaction (benchmarks and tests).
  absl::Status BulkInsertTrials(
      const TrialScope& scope,
      const std::vector<std::pair<Config, TrialResult>>& trials);

 private:
  // Borrowed reader connection, returned to the pool on destruction.
  class Reader {
   public:
    Reader(ResultStore* store, std::unique_ptr<SqliteDb> db)
        : store_(store), db_(std::move(db)) {}
    Reader(Reader&&) = default;
    ~Reader() {
      if (db_ == nullptr) return;
      absl::MutexLock lock(&store_->pool_mu_);
      store_->readers_.push_back(std::move(db_));
      store_->reader_free_.Signal();
    }
    SqliteDb* db() { return db_.get(); }

   private:
    ResultStore* store_;
    std::unique_ptr<SqliteDb> db_;
  };

  // Forgets, unless Committed() is called, the key rows a write transaction
  // created (rolled back with it). One per write transaction, under
  // writer_mu_.
  class CreatedIds {
   public:
    explicit CreatedIds(ResultStore* store) : store_(store) {}
    ~CreatedIds();
    void Committed() { committed_ = true; }

   private:
    ResultStore* store_;
    bool committed_ = false;
  };

  explicit ResultStore(std::string path) : path_(std::move(path)) {}
  absl::Status Migrate();
  // Every device, template and problem row's id into ids_, so that a key
  // missing there is missing from the store (no query needed to know).
  absl::Status LoadIds();
  // Keeps the id of a row just created in the open write transaction.
  int64_t Created(const std::string& key, int64_t id);
  // Trials of TopK answers kept in memory at most (about); an answer weighs
  // one more than its trials.
  static constexpr size_t kCachedTrials = size_t{1} << 17;
  static size_t Rows(const std::vector<RankedTrial>& v) { return 1 + v.size(); }

  // TopK and HasTunedProblem as read from the database.
  absl::StatusOr<std::vector<RankedTrial>> ReadTopK(
      const DeviceInfo& device, const Problem& problem,
      const std::vector<std::pair<std::string, std::string>>& templates, int k);
  // The device's tuned problems of one template version (name, hash), kept
  // (tuned_problems_).
  absl::StatusOr<std::shared_ptr<const ProblemSet>> TunedProblems(
      const DeviceInfo& device,
      const std::pair<std::string, std::string>& version);
  // Every problem the device has OK trials of for the template version.
  absl::StatusOr<std::shared_ptr<const ProblemSet>> ReadTunedProblems(
      const DeviceInfo& device,
      const std::pair<std::string, std::string>& version);
  absl::StatusOr<bool> ReadHasTunedProblem(
      const DeviceInfo& device,
      const std::vector<std::pair<std::string, std::string>>& templates);
  // After a committed write of trials of the problem on the device: the
  // answers read from those are stale, and with `newly_tuned` (the write
  // gave the problem its first OK trial of a template on the device) so are
  // the device's tuned problems. Further trials of a tuned problem leave
  // those as they are: the nearest rule's set outlives a running job.
  void TrialsChanged(const DeviceInfo& device, const Problem& problem,
                     bool newly_tuned);

  // A pooled reader; waits while kMaxReaders are in use.
  absl::StatusOr<Reader> AcquireReader();
  // The one integer `sql` selects, read with a pooled reader.
  absl::StatusOr<int64_t> ReadInt(const char* sql);
  absl::StatusOr<std::unique_ptr<SqliteDb>> OpenReader();

  // Ids of key rows, created on first use (writer) or looked up (readers).
  absl::StatusOr<int64_t> DeviceId(SqliteDb* db, const DeviceInfo& device,
                                   bool create);
  absl::StatusOr<int64_t> TemplateId(SqliteDb* db, const std::string& name,
                                     const std::string& hash, bool create);
  absl::StatusOr<int64_t> ProblemId(SqliteDb* db, const Problem& problem,
                                    bool create);
  // TemplateId of each of `templates` (name -> hash), 0 for one the store
  // has no row of.
  absl::StatusOr<std::vector<int64_t>> TemplateIds(
      SqliteDb* db,
      const std::vector<std::pair<std::string, std::string>>& templates);
  // Sets *newly_tuned when the trial is the problem's first OK one of the
  // template on the device (leaves it as it was otherwise).
  absl::StatusOr<StoredTrial> InsertTrialLocked(const TrialScope& scope,
                                                const Config& config,
                                                const TrialResult& result,
                                                bool* newly_tuned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);

  const std::string path_;
  absl::Mutex writer_mu_;
  std::unique_ptr<SqliteDb> writer_ ABSL_GUARDED_BY(writer_mu_);
  absl::Mutex pool_mu_;
  std::vector<std::unique_ptr<SqliteDb>> readers_ ABSL_GUARDED_BY(pool_mu_);
  // Reader connections in use, idle or being opened.
  int open_readers_ ABSL_GUARDED_BY(pool_mu_) = 0;
  absl::CondVar reader_free_;
  // Key row ids never change once created, so they are kept: every row's
  // (LoadIds, and each row this store creates).
  absl::Mutex ids_mu_;
  absl::flat_hash_map<std::string, int64_t> ids_ ABSL_GUARDED_BY(ids_mu_);
  // Keys of rows created by the open write transaction.
  std::vector<std::string> created_ ABSL_GUARDED_BY(ids_mu_);
  // Answers kept until a trial write: TopK's per (device, problem);
  // HasTunedProblem's per device, until one of its problems is newly tuned.
  GenerationCache<std::vector<RankedTrial>> top_k_{kCachedTrials, &Rows};
  GenerationCache<bool> has_tuned_{1024};
  // The tuned problems NearestTunedProblem searches, per device and
  // template version: reading them takes milliseconds on a large store,
  // searching them microseconds, and every query the nearest rule answers
  // asks anew.
  GenerationCache<std::shared_ptr<const ProblemSet>> tuned_problems_{256};
};

}  // namespace evotune

#endif  // EVOTUNE_STORAGE_RESULT_STORE_H_
