#include "tuner/jobs/trial_loop.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tuner/common/log.h"
#include "tuner/evaluator/evaluator.h"

namespace evotune {

bool Elite::Admits(double median_us) const {
  return static_cast<int>(fastest_.size()) < kSize ||
         median_us <= fastest_.back().first * kMargin;
}

void Elite::Add(const Config& config, const TrialResult& r) {
  if (r.status != TrialStatus::kOk ||
      (r.samples != 0 && r.samples < kFullTimingSamples)) {
    return;
  }
  auto at = std::upper_bound(
      fastest_.begin(), fastest_.end(), r.median_us,
      [](double t, const std::pair<double, Config>& e) { return t < e.first; });
  fastest_.insert(at, {r.median_us, config});
  if (static_cast<int>(fastest_.size()) > kSize) fastest_.pop_back();
}

// Completions of the loop's trials, filled by runner callbacks on any
// thread. Shared with the callbacks, which may outlive the loop: once
// abandoned, results that still arrive are stored without the job.
struct TrialLoop::Inbox {
  absl::Mutex mu;
  std::deque<Arrival> arrived ABSL_GUARDED_BY(mu);
  bool abandoned ABSL_GUARDED_BY(mu) = false;
};

namespace {

// Another template's configs join a confirmation only while its fastest is
// within this factor of the job's: farther behind, the few percent that
// clocks drift by cannot reorder them.
constexpr double kRivalTemplateReach = 1.25;

// A result nobody waits for any more is still a measurement.
void StoreOrphan(ResultStore* store, const TrialScope& scope,
                 const Config& config, const TrialResult& result) {
  if (absl::StatusOr<StoredTrial> s = store->InsertTrial(scope, config, result);
      !s.ok()) {
    LogError(absl::StrCat("storing a result of an abandoned trial: ",
                          s.status().message()));
  }
}

// One line for the log: each config's median alone and in turns; another
// template's configs carry its name.
std::string ConfirmedLine(
    const std::string& job_id, int turns,
    const std::vector<std::pair<Contender, double>>& alone,
    const std::vector<TimedTrial>& timed) {
  const std::string& own = alone.front().first.template_name;
  size_t others = 0;
  for (const auto& [c, us] : alone) others += c.template_name != own;
  std::string out = absl::StrCat(
      "job ", job_id, ": its ", timed.size() - others, " fastest",
      others > 0 ? absl::StrCat(" and ", others, " of other templates") : "",
      " timed again together, ", turns, " turns (us alone -> in turns):");
  for (size_t i = 0; i < timed.size(); ++i) {
    const TrialResult& r = timed[i].result;
    const std::string& name = alone[i].first.template_name;
    absl::StrAppend(
        &out, i == 0 ? " " : "; ", name == own ? "" : absl::StrCat(name, ":"),
        ConfigKey(timed[i].config), " ",
        absl::StrFormat("%.2f", alone[i].second), " -> ",
        r.status == TrialStatus::kOk ? absl::StrFormat("%.2f", r.median_us)
                                     : std::string(TrialStatusName(r.status)));
  }
  return out;
}

}  // namespace

TrialLoop::TrialLoop(ResultStore* store, TrialRunner* runner, Hooks hooks,
                     const JobRecord& job, const KernelTemplate& t,
                     const DeviceInfo& device,
                     std::unique_ptr<SearchStrategy> strategy)
    : store_(store),
      runner_(runner),
      hooks_(std::move(hooks)),
      job_(job),
      template_(t),
      device_(device),
      scope_{device, job.template_name, job.template_hash, job.problem},
      strategy_(std::move(strategy)),
      inbox_(std::make_shared<Inbox>()),
      start_(hooks_.clock->Now()) {
  measured_ = {
      [this](const Config& c, const TrialResult& r) {
        strategy_->Report({{c, r}});
      },
      [this](const Config& c, const TrialResult& r) { elite_.Add(c, r); },
      [this](const Config&, const TrialResult&) { hooks_.notify(); },
  };
}

TrialLoop::~TrialLoop() { Abandon(); }

absl::Status TrialLoop::Run(bool& cancelled) {
  absl::Status failure = Search(cancelled);
  if (failure.ok() && !hooks_.should_stop(&cancelled)) {
    failure = Confirm(cancelled);
  }
  Abandon();
  return failure;
}

absl::Status TrialLoop::Search(bool& cancelled) {
  absl::Status failure = Resume();
  while (failure.ok() && !hooks_.should_stop(&cancelled)) {
    failure = Fill();
    if (!failure.ok()) break;
    if (in_flight_.empty()) {
      if (!BudgetLeft() || exhausted_) break;
      continue;
    }
    std::optional<Arrival> arrival = Await();
    if (!arrival.has_value()) continue;
    const Config config = in_flight_.at(arrival->id).config;
    in_flight_.erase(arrival->id);
    if (!arrival->result.ok()) {
      // A runner that failed because the job is stopping is no failure.
      if (!hooks_.should_stop(&cancelled)) failure = arrival->result.status();
      break;
    }
    failure = Tell(config, *arrival->result);
  }
  return failure;
}

absl::Status TrialLoop::Resume() {
  absl::StatusOr<std::vector<JobEvent>> done =
      store_->ListJobEvents(job_.job_id, 0, std::numeric_limits<int>::max());
  if (!done.ok()) return done.status();
  std::vector<std::pair<Config, TrialResult>> known;
  for (const JobEvent& e : *done) {
    known.push_back({e.trial.config, e.trial.result});
    elite_.Add(e.trial.config, e.trial.result);
  }
  strategy_->Report(known);
  trials_done_ = static_cast<int64_t>(done->size());
  return absl::OkStatus();
}

absl::Status TrialLoop::Fill() {
  if (!BudgetLeft()) return absl::OkStatus();
  const int target =
      runner_->Parallelism(device_) + runner_->QueuedAhead(device_);
  while (!exhausted_ && InFlight() < target &&
         trials_done_ + InFlight() < job_.max_trials) {
    std::optional<Config> config = Next(target);
    if (!config.has_value()) break;
    absl::StatusOr<std::optional<StoredTrial>> stored =
        store_->FindTrial(scope_, *config);
    if (!stored.ok()) return stored.status();
    if (stored->has_value()) {
      absl::Status s = Record(*config, (*stored)->result, /*cached=*/true);
      if (!s.ok()) return s;
      continue;
    }
    Launch(*config, /*quick=*/true);
  }
  return absl::OkStatus();
}

std::optional<Config> TrialLoop::Next(int target) {
  if (pending_.empty()) {
    if (strategy_->Done()) {  // Covered its space, or converged.
      exhausted_ = true;
      return std::nullopt;
    }
    const int n = static_cast<int>(
        std::min<int64_t>(target, job_.max_trials - trials_done_ - InFlight()));
    for (Config& c : strategy_->Propose(n)) pending_.push_back(std::move(c));
    if (pending_.empty()) {
      exhausted_ = true;
      return std::nullopt;
    }
  }
  Config config = std::move(pending_.front());
  pending_.pop_front();
  return config;
}

absl::StatusOr<std::vector<std::pair<Contender, double>>> TrialLoop::ToConfirm()
    const {
  std::vector<std::pair<Contender, double>> out;
  for (const auto& [us, config] : elite_.members()) {
    out.push_back({{template_.name, template_.hash, config}, us});
  }
  if (out.empty()) return out;
  // Each other template's fastest, the fastest template first, unless it is
  // too far behind for drift to matter.
  std::vector<std::vector<RankedTrial>> others;
  for (const auto& version : hooks_.rival_templates) {
    absl::StatusOr<std::vector<RankedTrial>> top =
        store_->TopK(device_, job_.problem, {version}, Elite::kSize);
    if (!top.ok()) return top.status();
    if (!top->empty() && top->front().trial.result.median_us <=
                             kRivalTemplateReach * out.front().second) {
      others.push_back(*std::move(top));
    }
  }
  std::sort(others.begin(), others.end(), [](const auto& a, const auto& b) {
    return a.front().trial.result.median_us < b.front().trial.result.median_us;
  });
  for (const std::vector<RankedTrial>& top : others) {
    for (const RankedTrial& r : top) {
      if (out.size() > static_cast<size_t>(kMaxRivals)) return out;
      out.push_back({{r.template_name, r.template_hash, r.trial.config},
                     r.trial.result.median_us});
    }
  }
  return out;
}

TrialTask TrialLoop::ConfirmTask(
    const std::vector<std::pair<Contender, double>>& confirm) const {
  TrialTask task{device_, template_.name, template_.hash, {}, job_.problem};
  if (confirm.empty()) return task;
  task.config = confirm.front().first.config;
  for (size_t i = 1; i < confirm.size(); ++i) {
    task.rivals.push_back(confirm[i].first);
  }
  task.turns = hooks_.confirm_turns;
  return task;
}

absl::Status TrialLoop::Confirm(bool& cancelled) {
  if (hooks_.confirm_turns <= 0) return absl::OkStatus();
  absl::StatusOr<std::vector<std::pair<Contender, double>>> confirm =
      ToConfirm();
  if (!confirm.ok()) return confirm.status();
  TrialTask task = ConfirmTask(*confirm);
  if (!runner_->CanRun(task)) {
    // No worker has every template of it: the job's own configs alone.
    confirm->erase(std::remove_if(confirm->begin(), confirm->end(),
                                  [&](const auto& c) {
                                    return c.first.template_name !=
                                           template_.name;
                                  }),
                   confirm->end());
    task = ConfirmTask(*confirm);
  }
  if (confirm->size() < 2) return absl::OkStatus();
  Launch(task);
  std::optional<Arrival> arrival;
  while (!arrival.has_value()) {
    if (hooks_.should_stop(&cancelled)) return absl::OkStatus();
    arrival = Await();
  }
  in_flight_.erase(arrival->id);
  // The search's results are stored: a confirmation that fails leaves them
  // as they are, and the job done.
  if (!arrival->result.ok() ||
      arrival->result->rival_results.size() != task.rivals.size()) {
    LogInfo(
        absl::StrCat("job ", job_.job_id,
                     ": its fastest configs could not be timed ", "together (",
                     arrival->result.ok() ? arrival->result->error
                                          : arrival->result.status().ToString(),
                     "); their own timings stand"));
    return absl::OkStatus();
  }
  TrialResult result = *std::move(arrival->result);
  std::vector<TrialResult> results = std::move(result.rival_results);
  result.rival_results.clear();
  results.insert(results.begin(), std::move(result));
  std::vector<TimedTrial> timed;
  for (size_t i = 0; i < confirm->size(); ++i) {
    const Contender& c = (*confirm)[i].first;
    timed.push_back({{device_, c.template_name, c.template_hash, job_.problem},
                     c.config,
                     std::move(results[i])});
  }
  if (absl::Status s = store_->RecordTimedInTurns(timed); !s.ok()) return s;
  LogInfo(ConfirmedLine(job_.job_id, task.turns, *confirm, timed));
  hooks_.notify();
  return absl::OkStatus();
}

void TrialLoop::Launch(const Config& config, bool quick) {
  Launch(TrialTask{device_, template_.name, template_.hash, config,
                   job_.problem, quick});
}

void TrialLoop::Launch(TrialTask task) {
  const uint64_t key = ++launches_;
  const Config config = task.config;
  in_flight_[key].config = config;
  in_flight_[key].runner_id = runner_->Start(
      std::move(task), [box = inbox_, key, store = store_, scope = scope_,
                        config](absl::StatusOr<TrialResult> r) {
        absl::MutexLock lock(&box->mu);
        if (box->abandoned) {
          if (r.ok()) StoreOrphan(store, scope, config, *r);
          return;
        }
        box->arrived.push_back({key, std::move(r)});
      });
}

std::optional<TrialLoop::Arrival> TrialLoop::Await() {
  absl::MutexLock lock(&inbox_->mu);
  auto has = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(inbox_->mu) {
    return !inbox_->arrived.empty();
  };
  // Wakes now and then to check whether the job must stop.
  inbox_->mu.AwaitWithTimeout(absl::Condition(&has), absl::Milliseconds(200));
  if (inbox_->arrived.empty()) return std::nullopt;
  Arrival arrival = std::move(inbox_->arrived.front());
  inbox_->arrived.pop_front();
  return arrival;
}

absl::Status TrialLoop::Tell(const Config& config, const TrialResult& result) {
  if (result.status == TrialStatus::kOk &&
      result.samples < kFullTimingSamples && elite_.Admits(result.median_us)) {
    Launch(config, /*quick=*/false);
    return absl::OkStatus();
  }
  return Record(config, result, /*cached=*/false);
}

absl::Status TrialLoop::Record(const Config& config, const TrialResult& result,
                               bool cached) {
  absl::StatusOr<JobEvent> event =
      store_->AppendJobTrial(job_, config, result, cached, Elapsed());
  if (!event.ok()) return event.status();
  trials_done_ = event->sequence;
  for (const MeasureCallback& measured : measured_) measured(config, result);
  return absl::OkStatus();
}

void TrialLoop::Abandon() {
  if (abandoned_) return;
  abandoned_ = true;
  {
    absl::MutexLock lock(&inbox_->mu);
    inbox_->abandoned = true;
    for (const Arrival& a : inbox_->arrived) {
      auto it = in_flight_.find(a.id);
      if (a.result.ok() && it != in_flight_.end()) {
        StoreOrphan(store_, scope_, it->second.config, *a.result);
      }
    }
  }
  for (const auto& [key, flight] : in_flight_) {
    runner_->Withdraw(flight.runner_id);
  }
}

bool TrialLoop::BudgetLeft() const {
  return trials_done_ < job_.max_trials && Elapsed() < job_.max_seconds;
}

double TrialLoop::Elapsed() const {
  return job_.elapsed_seconds +
         absl::ToDoubleSeconds(hooks_.clock->Now() - start_);
}

}  // namespace evotune
