// ResultStore's queries: trials by key and scope, the fastest per problem,
// the nearest tuned problem, devices and jobs. Each runs on a pooled reader
// connection and never blocks the writer.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "storage/result_store.h"
#include "storage/store_rows.h"

namespace evotune {

using store_rows::kJobSelect;
using store_rows::ReadJob;
using store_rows::ReadRows;
using store_rows::ReadTrial;
using store_rows::SelectTrial;
using store_rows::TrialColumns;

// The ids of the templates the store has rows of (TemplateIds' nonzero).
std::vector<int64_t> Known(const std::vector<int64_t>& ids) {
  std::vector<int64_t> out;
  for (int64_t id : ids) {
    if (id != 0) out.push_back(id);
  }
  return out;
}

std::string TopKSql(int n_templates) {
  std::vector<std::string> marks(n_templates, "?");
  // The trials_best index yields rows in median_us order for the (device,
  // problem) prefix; the template filter is applied while scanning it.
  return absl::StrCat(
      "SELECT template_id, ", TrialColumns(),
      " FROM trials INDEXED BY trials_best WHERE device_id = ? AND "
      "problem_id = ? AND status = 1 AND template_id IN (",
      absl::StrJoin(marks, ","), ") ORDER BY median_us");
}

std::string ConfirmedSql(int n_templates) {
  std::vector<std::string> marks(n_templates, "?");
  return absl::StrCat(
      "SELECT template_id, MAX(median_us), MAX(confirmed_through) FROM trials "
      "INDEXED BY trials_confirmed WHERE device_id = ? AND problem_id = ? AND "
      "status = 1 AND timed_against > 0 AND template_id IN (",
      absl::StrJoin(marks, ","), ") GROUP BY template_id");
}

absl::StatusOr<std::optional<StoredTrial>> ResultStore::FindTrial(
    const TrialScope& scope, const Config& config) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  absl::StatusOr<int64_t> device_id = DeviceId(db, scope.device, false);
  absl::StatusOr<int64_t> template_id =
      TemplateId(db, scope.template_name, scope.template_hash, false);
  absl::StatusOr<int64_t> problem_id = ProblemId(db, scope.problem, false);
  for (const absl::Status& s :
       {device_id.status(), template_id.status(), problem_id.status()}) {
    if (absl::IsNotFound(s)) return std::nullopt;
    if (!s.ok()) return s;
  }
  return SelectTrial(db, *device_id, *template_id, *problem_id,
                     ConfigKey(config));
}

absl::StatusOr<std::vector<StoredTrial>> ResultStore::ListTrials(
    const TrialScope& scope) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  std::vector<StoredTrial> out;
  absl::StatusOr<int64_t> device_id = DeviceId(db, scope.device, false);
  absl::StatusOr<int64_t> template_id =
      TemplateId(db, scope.template_name, scope.template_hash, false);
  absl::StatusOr<int64_t> problem_id = ProblemId(db, scope.problem, false);
  for (const absl::Status& s :
       {device_id.status(), template_id.status(), problem_id.status()}) {
    if (absl::IsNotFound(s)) return out;
    if (!s.ok()) return s;
  }
  absl::StatusOr<Statement*> sel = db->Prepare(absl::StrCat(
      "SELECT ", TrialColumns(),
      " FROM trials WHERE device_id = ? AND template_id = ? AND problem_id = "
      "? ORDER BY id"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, *device_id).Bind(2, *template_id).Bind(3, *problem_id);
  return ReadRows<StoredTrial>(*sel, [](Statement* s) { return ReadTrial(s); });
}

namespace {

// What names the answer of a query over `templates` (name -> hash).
std::string TemplatesKey(
    const std::vector<std::pair<std::string, std::string>>& templates) {
  std::string key;
  for (const auto& [name, hash] : templates) {
    absl::StrAppend(&key, name, "\x1f", hash, "\x1e");
  }
  return key;
}

std::string TopKScope(const DeviceInfo& device, const Problem& problem) {
  return absl::StrCat(store_rows::DeviceKey(device), "\x1d",
                      ProblemKey(problem));
}

}  // namespace

void ResultStore::TrialsChanged(const DeviceInfo& device,
                                const Problem& problem, bool newly_tuned) {
  top_k_.Bump(TopKScope(device, problem));
  if (newly_tuned) {
    has_tuned_.Bump(store_rows::DeviceKey(device));
    tuned_problems_.Bump(store_rows::DeviceKey(device));
  }
}

absl::StatusOr<std::vector<RankedTrial>> ResultStore::TopK(
    const DeviceInfo& device, const Problem& problem,
    const std::vector<std::pair<std::string, std::string>>& templates, int k) {
  const std::string scope = TopKScope(device, problem);
  const std::string key =
      absl::StrCat(scope, "\x1d", TemplatesKey(templates), k);
  return top_k_.FindOrRead(
      scope, key, [&] { return ReadTopK(device, problem, templates, k); });
}

namespace {

// A template's trials timed in turns on a problem: the slowest of them, and
// the newest trial stored when one of them was timed.
struct Confirmed {
  double slowest_us = 0;
  int64_t through = 0;
};

void BindScope(Statement* s, int64_t device_id, int64_t problem_id,
               const std::vector<int64_t>& template_ids) {
  int index = 1;
  s->Bind(index++, device_id);
  s->Bind(index++, problem_id);
  for (int64_t id : template_ids) s->Bind(index++, id);
}

// Confirmed, by template id, of the templates that have any on the problem.
absl::StatusOr<absl::flat_hash_map<int64_t, Confirmed>> ReadConfirmed(
    SqliteDb* db, int64_t device_id, int64_t problem_id,
    const std::vector<int64_t>& template_ids) {
  absl::StatusOr<Statement*> sel =
      db->Prepare(ConfirmedSql(static_cast<int>(template_ids.size())));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  BindScope(*sel, device_id, problem_id, template_ids);
  absl::flat_hash_map<int64_t, Confirmed> out;
  while (true) {
    absl::StatusOr<bool> more = (*sel)->Step();
    if (!more.ok()) return more.status();
    if (!*more) return out;
    out[(*sel)->Int(0)] = {(*sel)->Double(1), (*sel)->Int(2)};
  }
}

// A trial's place in TopK: its median, except for a config timed alone that
// was stored when its template's fastest were timed in turns (passed over
// for them by its search's time, taken at another moment): no earlier than
// the slowest of those.
double RankKey(const StoredTrial& t, const Confirmed* c) {
  if (c == nullptr || t.result.timed_against > 0 || t.trial_id > c->through) {
    return t.result.median_us;
  }
  return std::max(t.result.median_us, c->slowest_us);
}

}  // namespace

absl::StatusOr<std::vector<RankedTrial>> ResultStore::ReadTopK(
    const DeviceInfo& device, const Problem& problem,
    const std::vector<std::pair<std::string, std::string>>& templates, int k) {
  // Keys are known without a query: a problem never tuned costs no reader.
  std::vector<RankedTrial> out;
  absl::StatusOr<int64_t> device_id = DeviceId(nullptr, device, false);
  absl::StatusOr<int64_t> problem_id = ProblemId(nullptr, problem, false);
  for (const absl::Status& s : {device_id.status(), problem_id.status()}) {
    if (absl::IsNotFound(s)) return out;
    if (!s.ok()) return s;
  }
  absl::StatusOr<std::vector<int64_t>> ids = TemplateIds(nullptr, templates);
  if (!ids.ok()) return ids.status();
  const std::vector<int64_t> template_ids = Known(*ids);
  if (template_ids.empty() || k <= 0) return out;
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<absl::flat_hash_map<int64_t, Confirmed>> confirmed =
      ReadConfirmed(r->db(), *device_id, *problem_id, template_ids);
  if (!confirmed.ok()) return confirmed.status();
  absl::StatusOr<Statement*> sel =
      r->db()->Prepare(TopKSql(static_cast<int>(template_ids.size())));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  BindScope(*sel, *device_id, *problem_id, template_ids);
  struct Ranked {
    double key;
    bool passed_over;  // Ranks after the confirmed trials of the same key.
    RankedTrial trial;
  };
  std::vector<Ranked> ranked;
  int settled = 0;  // Of `ranked`, keys no row still to come can precede.
  while (settled < k) {
    absl::StatusOr<bool> more = (*sel)->Step();
    if (!more.ok()) return more.status();
    if (!*more) break;
    absl::StatusOr<StoredTrial> t = ReadTrial(*sel, 1);
    if (!t.ok()) return t.status();
    const int64_t id = (*sel)->Int(0);
    const auto c = confirmed->find(id);
    const double key =
        RankKey(*t, c == confirmed->end() ? nullptr : &c->second);
    const auto& [name, hash] =
        templates[std::find(ids->begin(), ids->end(), id) - ids->begin()];
    const double median = t->result.median_us;
    ranked.push_back(
        {key, key != median, RankedTrial{name, hash, *std::move(t)}});
    // Rows come by median, and none ranks ahead of its own median.
    settled = static_cast<int>(
        std::count_if(ranked.begin(), ranked.end(),
                      [&](const Ranked& e) { return e.key <= median; }));
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& a, const Ranked& b) {
                     if (a.key != b.key) return a.key < b.key;
                     return !a.passed_over && b.passed_over;
                   });
  for (Ranked& e : ranked) {
    if (static_cast<int>(out.size()) == k) break;
    out.push_back(std::move(e.trial));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const ProblemSet>> ResultStore::TunedProblems(
    const DeviceInfo& device,
    const std::pair<std::string, std::string>& version) {
  const std::string scope = store_rows::DeviceKey(device);
  const std::string key = absl::StrCat(scope, "\x1d", TemplatesKey({version}));
  return tuned_problems_.FindOrRead(
      scope, key, [&] { return ReadTunedProblems(device, version); });
}

absl::StatusOr<std::optional<Problem>> ResultStore::NearestTunedProblem(
    const DeviceInfo& device, const Problem& problem,
    const std::vector<std::pair<std::string, std::string>>& templates,
    bool same_class) {
  // One set per template version, so that queries over any of them (one
  // template, or all) share the reads.
  std::optional<ProblemSet::Match> best;
  for (const auto& version : templates) {
    absl::StatusOr<std::shared_ptr<const ProblemSet>> tuned =
        TunedProblems(device, version);
    if (!tuned.ok()) return tuned.status();
    std::optional<ProblemSet::Match> m = (*tuned)->Nearest(problem, same_class);
    if (m && (!best || m->distance < best->distance)) best = std::move(m);
  }
  if (!best) return std::nullopt;
  return best->problem;
}

absl::Status ResultStore::LoadTunedProblems(
    const DeviceInfo& device,
    const std::vector<std::pair<std::string, std::string>>& templates) {
  for (const auto& version : templates) {
    if (absl::Status s = TunedProblems(device, version).status(); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ProblemSet>>
ResultStore::ReadTunedProblems(
    const DeviceInfo& device,
    const std::pair<std::string, std::string>& version) {
  auto none = [] {
    return std::make_shared<const ProblemSet>(std::vector<Problem>{});
  };
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  absl::StatusOr<int64_t> device_id = DeviceId(db, device, false);
  if (absl::IsNotFound(device_id.status())) return none();
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<std::vector<int64_t>> ids = TemplateIds(db, {version});
  if (!ids.ok()) return ids.status();
  if (ids->front() == 0) return none();
  // (device, template, problem) is the table's key: each problem once.
  absl::StatusOr<Statement*> sel = db->Prepare(
      "SELECT p.key FROM tuned_problems tp JOIN problems p ON p.id = "
      "tp.problem_id WHERE tp.device_id = ? AND tp.template_id = ?");
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, *device_id).Bind(2, ids->front());
  std::vector<Problem> problems;
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<Problem> p = ParseProblemKey((*sel)->Text(0));
    if (!p.ok()) return absl::DataLossError(p.status().message());
    problems.push_back(*std::move(p));
  }
  return std::make_shared<const ProblemSet>(std::move(problems));
}

absl::StatusOr<bool> ResultStore::HasTunedProblem(
    const DeviceInfo& device,
    const std::vector<std::pair<std::string, std::string>>& templates) {
  const std::string scope = store_rows::DeviceKey(device);
  const std::string key = absl::StrCat(scope, "\x1d", TemplatesKey(templates));
  return has_tuned_.FindOrRead(
      scope, key, [&] { return ReadHasTunedProblem(device, templates); });
}

absl::StatusOr<bool> ResultStore::ReadHasTunedProblem(
    const DeviceInfo& device,
    const std::vector<std::pair<std::string, std::string>>& templates) {
  absl::StatusOr<int64_t> device_id = DeviceId(nullptr, device, false);
  if (absl::IsNotFound(device_id.status())) return false;
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<std::vector<int64_t>> ids = TemplateIds(nullptr, templates);
  if (!ids.ok()) return ids.status();
  const std::vector<int64_t> template_ids = Known(*ids);
  if (template_ids.empty()) return false;
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  SqliteDb* db = r->db();
  std::vector<std::string> marks(template_ids.size(), "?");
  absl::StatusOr<Statement*> sel = db->Prepare(absl::StrCat(
      "SELECT 1 FROM tuned_problems WHERE device_id = ? AND template_id IN (",
      absl::StrJoin(marks, ","), ") LIMIT 1"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  int index = 1;
  (*sel)->Bind(index++, *device_id);
  for (int64_t id : template_ids) (*sel)->Bind(index++, id);
  return (*sel)->Step();
}

absl::StatusOr<DeviceInfo> ResultStore::FindDevice(const std::string& name) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(
      "SELECT d.name, d.cc_major, d.cc_minor, d.driver_version, "
      "d.nvrtc_version, d.smem_per_block_bytes, d.max_threads_per_block, "
      "d.multiprocessors FROM devices d WHERE d.name = ? ORDER BY (SELECT "
      "MAX(id) FROM trials t WHERE t.device_id = d.id) DESC, d.id DESC "
      "LIMIT 1");
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, name);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row) {
    return absl::NotFoundError(
        absl::StrCat("device: no results for a device named \"", name, "\""));
  }
  DeviceInfo d;
  d.name = (*sel)->Text(0);
  d.cc_major = static_cast<int>((*sel)->Int(1));
  d.cc_minor = static_cast<int>((*sel)->Int(2));
  d.driver_version = (*sel)->Text(3);
  d.nvrtc_version = (*sel)->Text(4);
  if ((*sel)->Int(5) > 0) {
    d.limits.smem_per_block_bytes = (*sel)->Int(5);
    d.limits.max_threads_per_block = static_cast<int>((*sel)->Int(6));
    d.limits.multiprocessors = static_cast<int>((*sel)->Int(7));
    d.limits.compute_capability = 10 * d.cc_major + d.cc_minor;
  }
  return d;
}

absl::StatusOr<int64_t> ResultStore::ReadInt(const char* sql) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(sql);
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  return (*sel)->Int(0);
}

absl::StatusOr<int64_t> ResultStore::CountTrials() {
  return ReadInt("SELECT COUNT(*) FROM trials");
}

absl::StatusOr<int64_t> ResultStore::LastTrialId() {
  return ReadInt("SELECT COALESCE(MAX(id), 0) FROM trials");
}

absl::StatusOr<std::set<std::string>> ResultStore::RejectedConfigs(
    const DeviceInfo& device, const std::string& template_name,
    const std::string& template_hash, const Problem& problem) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  std::set<std::string> out;
  absl::StatusOr<int64_t> device_id = DeviceId(r->db(), device, false);
  absl::StatusOr<int64_t> template_id =
      TemplateId(r->db(), template_name, template_hash, false);
  for (const absl::Status& s : {device_id.status(), template_id.status()}) {
    if (absl::IsNotFound(s)) return out;
    if (!s.ok()) return s;
  }
  absl::StatusOr<Statement*> sel = r->db()->Prepare(
      "SELECT DISTINCT tr.config_key FROM trials tr JOIN problems p ON p.id = "
      "tr.problem_id WHERE tr.device_id = ? AND tr.template_id = ? AND "
      "tr.status = ? AND p.head_dim = ? AND p.dtype = ?");
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)
      ->Bind(1, *device_id)
      .Bind(2, *template_id)
      .Bind(3, int64_t{static_cast<int>(TrialStatus::kResourceRejected)})
      .Bind(4, int64_t{problem.head_dim})
      .Bind(5, DTypesName(problem));
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    out.insert((*sel)->Text(0));
  }
}

absl::StatusOr<std::vector<MeasuredTrial>> ResultStore::MeasuredTrials(
    const DeviceInfo& device) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<int64_t> device_id = DeviceId(r->db(), device, false);
  if (absl::IsNotFound(device_id.status())) {
    return std::vector<MeasuredTrial>{};
  }
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(
      "SELECT t.name, t.source_hash, p.key, tr.config_key, tr.median_us FROM "
      "trials tr JOIN templates t ON t.id = tr.template_id JOIN problems p ON "
      "p.id = tr.problem_id WHERE tr.device_id = ? AND tr.status = 1 ORDER BY "
      "tr.id");
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, *device_id);
  std::vector<MeasuredTrial> out;
  while (true) {
    absl::StatusOr<bool> row = (*sel)->Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    absl::StatusOr<Problem> problem = ParseProblemKey((*sel)->Text(2));
    absl::StatusOr<Config> config = ParseConfigKey((*sel)->Text(3));
    if (!problem.ok() || !config.ok()) {
      return absl::DataLossError("trials: a malformed problem or config key");
    }
    out.push_back({(*sel)->Text(0), (*sel)->Text(1), *problem, *config,
                   (*sel)->Double(4)});
  }
}

absl::StatusOr<JobRecord> ResultStore::GetJob(const std::string& job_id) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel =
      r->db()->Prepare(absl::StrCat(kJobSelect, "WHERE j.id = ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, job_id);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row)
    return absl::NotFoundError(absl::StrCat("job_id: no job ", job_id));
  return ReadJob(*sel);
}

absl::StatusOr<std::vector<JobRecord>> ResultStore::ListJobs(
    std::optional<JobState> state) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(
      absl::StrCat(kJobSelect, state ? "WHERE j.state = ? " : "",
                   "ORDER BY j.created_at DESC, j.rowid DESC"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  if (state) (*sel)->Bind(1, int64_t{static_cast<int>(*state)});
  return ReadRows<JobRecord>(*sel, ReadJob);
}

absl::StatusOr<std::vector<JobEvent>> ResultStore::ListJobEvents(
    const std::string& job_id, int64_t after, int limit) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(absl::StrCat(
      "SELECT jt.seq, jt.cached, ", TrialColumns("t."),
      " FROM job_trials jt JOIN trials t ON t.id = jt.trial_id WHERE "
      "jt.job_id = ? AND jt.seq > ? ORDER BY jt.seq LIMIT ?"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, job_id).Bind(2, after).Bind(3, int64_t{limit});
  return ReadRows<JobEvent>(*sel, [](Statement* s) -> absl::StatusOr<JobEvent> {
    absl::StatusOr<StoredTrial> t = ReadTrial(s, 2);
    if (!t.ok()) return t.status();
    return JobEvent{s->Int(0), *std::move(t), s->Int(1) != 0};
  });
}

absl::StatusOr<std::optional<StoredTrial>> ResultStore::JobBest(
    const std::string& job_id) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> sel = r->db()->Prepare(absl::StrCat(
      "SELECT ", TrialColumns("t."),
      " FROM job_trials jt JOIN trials t ON t.id = jt.trial_id WHERE "
      "jt.job_id = ? AND t.status = 1 ORDER BY t.median_us LIMIT 1"));
  if (!sel.ok()) return sel.status();
  ScopedReset reset(*sel);
  (*sel)->Bind(1, job_id);
  absl::StatusOr<bool> row = (*sel)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<StoredTrial>();
  absl::StatusOr<StoredTrial> t = ReadTrial(*sel);
  if (!t.ok()) return t.status();
  return std::optional<StoredTrial>(*std::move(t));
}

}  // namespace evotune
